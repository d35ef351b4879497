"""SQLite durability modes: with the default WRITES, exactly the steps that protect a write or record a decision
commit with an fsync (``PRAGMA synchronous = FULL`` around their transaction); the hot-path counters do not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget
from agents_loopguard.store.base import OperationState, StoreError, TraceEntry
from agents_loopguard.store.sql import SQLStore


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
