"""SQLite durability modes: with the default WRITES, exactly the steps that protect a write or record a decision
commit with an fsync (``PRAGMA synchronous = FULL`` around their transaction); the hot-path counters do not. A power
loss is emulated on a real guarded write: the WAL cut back to what the last fsynced commit left in it. PostgreSQL's
default WRITES commits the same steps with the server's WAL flush, the others with ``synchronous_commit`` off for
their own transaction."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget
from agents_loopguard.store.base import OperationState, StoreError, TraceEntry
from agents_loopguard.store.sql import SQLStore
from tests.support.store_trace import pg_sent


def traced(store: SQLStore) -> list[str]:
    statements: list[str] = []
    store._cursor().connection.set_trace_callback(statements.append)
    return statements


def fsynced(statements: list[str]) -> bool:
    """True when a transaction in ``statements`` ran at synchronous=FULL and the connection went back to NORMAL."""
    text = [s.strip().upper() for s in statements]
    if "PRAGMA SYNCHRONOUS = FULL" not in text:
        return False
    start = text.index("PRAGMA SYNCHRONOUS = FULL")
    rest = text[start:]
    return rest.index("BEGIN IMMEDIATE") < rest.index("COMMIT") < rest.index("PRAGMA SYNCHRONOUS = NORMAL")


STEPS: dict[str, tuple[bool, Any]] = {
    "reserve_turn": (False, lambda s: s.reserve_turn("t")),
    "reserve_execution": (False, lambda s: s.reserve_execution("t", "fp-read", max_repeats=9)),
    "record_execution": (False, lambda s: s.record_execution("t", TraceEntry(kind="tool"), revision=1)),
    "record_execution of a write": (  # the ledger's answer: as durable as the reservation it answers
        True,
        lambda s: s.record_execution(
            "t", TraceEntry(kind="tool"), revision=1, operation=("op-w", OperationState.COMMITTED, {"ok": 1})
        ),
    ),
    "append_trace": (False, lambda s: s.append_trace("t", TraceEntry(kind="tool"))),
    "reserve_write": (True, lambda s: s.reserve_write("t", "op-w", "fp-w", "pay", max_repeats=9)),
    "reserve_operation": (True, lambda s: s.reserve_operation("t", "op-o", "fp-o", "pay")),
    "request_stop": (True, lambda s: s.request_stop("t", "operator")),
    "finish": (True, lambda s: s.finish("t", {"status": "stopped", "reason": "same_call"})),
}


@pytest.mark.parametrize("step", sorted(STEPS))
def test_default_mode_fsyncs_exactly_the_steps_that_protect_writes_and_decisions(step: str, tmp_path: Path) -> None:
    store = SQLStore(f"sqlite:///{tmp_path / 'lg.db'}")
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    statements = traced(store)
    durable, run = STEPS[step]
    run(store)
    assert fsynced(statements) is durable, statements
    assert store._cursor().connection.execute("PRAGMA synchronous").fetchone()[0] == 1, "back to NORMAL"


def test_a_reconciliation_is_durable(tmp_path: Path) -> None:
    store = SQLStore(f"sqlite:///{tmp_path / 'lg.db'}")
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    store.reserve_operation("t", "op", "fp", "pay")
    statements = traced(store)
    store.reconcile_operation("op", OperationState.COMMITTED, {"status": "ok"})
    assert fsynced(statements)


@pytest.mark.parametrize("mode,level", [("FULL", 2), ("NORMAL", 1), ("EXTRA", 3)])
def test_explicit_modes_apply_to_every_commit(mode: str, level: int, tmp_path: Path) -> None:
    store = SQLStore(f"sqlite:///{tmp_path / 'lg.db'}?synchronous={mode.lower()}")
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    statements = traced(store)
    store.reserve_write("t", "op-w", "fp-w", "pay", max_repeats=9)
    assert not any("PRAGMA SYNCHRONOUS" in s.upper() for s in statements), "no per-step switching"
    assert store._cursor().connection.execute("PRAGMA synchronous").fetchone()[0] == level


def test_an_unknown_mode_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="choose one of WRITES, FULL, EXTRA, NORMAL"):
        SQLStore(f"sqlite:///{tmp_path / 'lg.db'}?synchronous=sometimes")


WRITER = """
import os, signal, sys
from agents_loopguard import Budget, Guard
from agents_loopguard.store import SQLStore

url, log = sys.argv[1:]
store = SQLStore(url)
guard = Guard(budget=Budget(model_turns=3, tool_executions=3), store=store, task_id="t")
wal = store._db.path.with_name(store._db.path.name + "-wal")

def after_fsynced_commit(statement):  # the store sets NORMAL again right after a commit it fsynced
    if statement.strip().upper() == "PRAGMA SYNCHRONOUS = NORMAL":
        with open(log, "a") as f:
            f.write(f"{wal.stat().st_size}\\n")

store._cursor().connection.set_trace_callback(after_fsynced_commit)
ticket = guard.authorize({"tool": "confirm", "kind": "write", "operation_id": "op-1", "args": {"order": 1}})
verified = lambda call, result: {"revision": 1, "done": False, "effect": "committed"}
assert guard.settle(ticket, {"status": "ok", "receipt": "r-1"}, verified) is None
print("settled", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint: what is on disk is the WAL
"""


def test_a_write_answered_before_a_power_loss_is_still_committed_after_it(tmp_path: Path) -> None:
    """A guarded write in a real process, killed right after its result was recorded; then a power loss: the WAL
    keeps only what the last fsynced commit had written (the frames after it were never flushed) and the wal-index
    is gone. The ledger must still hold the write as committed, with its result: an ``unknown`` operation would
    need a human to reconcile a write that the guard saw succeed."""
    db, log = tmp_path / "lg.db", tmp_path / "fsynced.log"
    child = subprocess.run(
        [sys.executable, "-c", WRITER, f"sqlite:///{db}", str(log)], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == -signal.SIGKILL and child.stdout == "settled\n", child.stderr
    wal = db.with_name("lg.db-wal")
    fsynced = [int(size) for size in log.read_text().split()]
    assert fsynced and wal.stat().st_size >= fsynced[-1] > 0
    with wal.open("r+b") as f:  # the power loss
        f.truncate(fsynced[-1])
    db.with_name("lg.db-shm").unlink()
    with SQLStore(f"sqlite:///{db}", create=False) as store:
        record = store.lookup_operation("op-1")
        assert record is not None
        assert (record.state, record.result) == (OperationState.COMMITTED, {"status": "ok", "receipt": "r-1"})


RELAXED = "Parse: SELECT set_config('synchronous_commit', 'off', true)"


def relaxed(messages: list[str]) -> bool:
    """True when the step's transaction (the messages up to its first Sync) began with the relaxed commit."""
    if RELAXED not in messages:
        return False
    first_sync = messages.index("Sync")
    return messages.index(RELAXED) < first_sync and messages.count(RELAXED) == 1


PG_STEPS: dict[str, tuple[bool, Any]] = {
    **{name: step for name, step in STEPS.items() if name != "append_trace"},  # a trace row rides with the next step
    "ensure_task": (False, lambda s: s.ensure_task("t2", Budget(model_turns=1, tool_executions=1))),
    "set_stop_mark": (True, lambda s: s.set_stop_mark("t", "operator")),
    "reconcile_operation": (True, lambda s: s.reconcile_operation("op-u", OperationState.COMMITTED, {"ok": 1})),
}


@pytest.mark.postgres
@pytest.mark.parametrize("step", sorted(PG_STEPS))
def test_postgresql_relaxes_exactly_the_steps_that_decide_nothing(step: str, pg_schema_url: str) -> None:
    with SQLStore(pg_schema_url) as store:
        store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
        store.reserve_operation("t", "op-u", "fp-u", "pay")
        durable, run = PG_STEPS[step]
        messages = pg_sent(store, lambda: run(store))
        assert relaxed(messages) is not durable, messages
        setting = store._cursor().execute("SHOW synchronous_commit").fetchone()["synchronous_commit"]
        assert setting == "on", "the setting ends with the step's transaction"


@pytest.mark.postgres
def test_postgresql_full_waits_for_the_flush_at_every_step(pg_schema_url: str) -> None:
    url = pg_schema_url + "&synchronous=full"
    with SQLStore(url) as store:
        assert store.synchronous == "FULL" and "synchronous" not in store.url.query
        store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
        for step in ("reserve_turn", "reserve_execution", "record_execution", "finish"):
            messages = pg_sent(store, lambda run=STEPS[step][1]: run(store))
            assert RELAXED not in messages, (step, messages)
        assert store.task("t") is not None and store.task("t").used.models == 1  # type: ignore[union-attr]


@pytest.mark.postgres
def test_a_relaxed_step_is_seen_by_another_worker_when_it_returns(pg_schema_url: str) -> None:
    with SQLStore(pg_schema_url) as store, SQLStore(pg_schema_url, readonly=True) as other:
        store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
        assert store.synchronous == "WRITES"
        for n in range(1, 4):
            assert store.reserve_turn("t").granted
            assert other.task("t").used.models == n  # type: ignore[union-attr]


@pytest.mark.postgres
def test_an_unknown_postgresql_mode_is_a_clear_error(pg_schema_url: str) -> None:
    with pytest.raises(StoreError, match="on PostgreSQL choose one of WRITES, FULL"):
        SQLStore(pg_schema_url + "&synchronous=normal")
