"""What one guarded turn costs the database, pinned: transactions on SQLite, round trips on PostgreSQL; and how the
store saves them: trace rows and a read's result written with the next step, workers queued on a contended task
(PostgreSQL)."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status, Verdict
from agents_loopguard.store import OperationState, SQLStore, StoreError
from agents_loopguard.store.base import Store, TraceEntry
from agents_loopguard.store.sql.connection import _lock_key
from agents_loopguard.values.calls import Ticket
from tests.conftest import libpq_url
from tests.support.store_trace import pg_sent, round_trips, sent

pytestmark = pytest.mark.timeout(60)

BIG = Budget(model_turns=100, tool_executions=100)


def turn(guard: Guard, i: int) -> None:
    """One agent turn: reserve the model turn, trace its answer, reserve the tool call, record its result."""
    assert guard.begin_turn() is None
    guard.record_model_answer("answered")
    ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": i}})
    assert isinstance(ticket, Ticket)
    verify = lambda c, r: {"revision": i, "done": False, "effect": "none"}  # noqa: E731
    assert guard.settle(ticket, {"status": "ok"}, verify) is None


def test_a_full_turn_is_two_transactions_on_sqlite_and_two_round_trips_on_postgresql(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        guard = Guard(budget=BIG, store=store, task_id="t")
        turn(guard, 1)  # warm: connection, schema
        messages = sent(store, lambda: turn(guard, 2))
        if store.backend == "sqlite":
            # the previous read's result rides in the turn's transaction, the model's answer in the tool's
            assert messages.count("BEGIN IMMEDIATE") == 2 and messages.count("COMMIT") == 2, messages
        else:
            # one statement per step, what was deferred pipelined with it
            assert messages.count("Sync") + messages.count("Query") == 2, messages
        kinds = [(e.kind, e.result_class) for e in store.trace("t")]
        assert kinds == [("model", "reserved"), ("model", "answered"), ("tool", "ok")] * 2
        assert store.task("t").revision == 2  # type: ignore[union-attr]
        if store.backend == "postgresql":
            assert round_trips(store, lambda: turn(guard, 3)) == 2


def test_a_deferred_trace_row_is_read_at_once_here_and_elsewhere_after_the_next_step(sql_url: str) -> None:
    url = sql_url
    with SQLStore(url) as store, SQLStore(url) as other:
        store.ensure_task("t", BIG)
        store.reserve_turn("t", now=1)
        store.append_trace("t", TraceEntry(kind="model", result_class="answered", at=2))
        assert [e.seq for e in other.trace("t")] == [1], "not written yet: no transaction of its own"
        store.reserve_execution("t", "fp", max_repeats=9, now=3)  # written with this step
        assert [(e.seq, e.result_class) for e in other.trace("t")] == [(1, "reserved"), (2, "answered")]
        store.append_trace("t", TraceEntry(kind="tool", result_class="refused:same_call", at=4))
        assert [e.seq for e in store.trace("t")] == [1, 2, 3], "this store reads its own trace rows at once"
        assert [e.seq for e in other.trace("t")] == [1, 2, 3]
        with pytest.raises(StoreError):
            store.append_trace("missing", TraceEntry(kind="model"))  # an unknown task is refused at once
        store.append_trace("t", TraceEntry(kind="model", result_class="answered", at=5))
        store.close()  # closing writes what is deferred
        assert [e.seq for e in other.trace("t")] == [1, 2, 3, 4]


def test_a_refused_step_keeps_the_deferred_row_for_the_next_one(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        store.ensure_task("t", Budget(model_turns=1, tool_executions=1))
        store.reserve_turn("t", now=1)
        store.append_trace("t", TraceEntry(kind="model", result_class="answered", at=2))
        assert not store.reserve_turn("t", now=3).granted  # rolled back, and the deferred row with it
        assert store.finish("t", {"status": "stopped"}, now=4) == {"status": "stopped"}
        with SQLStore(sql_url, readonly=True) as reader:
            assert [(e.seq, e.result_class) for e in reader.trace("t")] == [(1, "reserved"), (2, "answered")]


@pytest.mark.postgres
def test_a_task_that_lost_a_race_queues_its_steps_on_the_tasks_lock(pg_schema_url: str) -> None:
    with SQLStore(pg_schema_url) as store:
        store.ensure_task("t", BIG)
        key = _lock_key("t")
        assert round_trips(store, lambda: store.reserve_turn("t")) == 1
        store._db._contended[key] = time.monotonic() + 60  # as after a lost race
        queued = pg_sent(store, lambda: store.reserve_turn("t"))
        # lock | the step | unlock: three transactions (a Sync ends each), the lock taken before the step's statement
        # and released after its commit, all sent before any answer is asked for. Whether psycopg sends a Flush at
        # the end depends on how fast the answers came back (none under load): only a Flush before the last Sync
        # would mean the step waited for an answer mid-pipeline.
        statements = [m for m in queued if m.startswith("Parse: ") or m == "Sync"]
        lock = next(i for i, m in enumerate(statements) if "pg_try_advisory_lock" in m)
        unlock = next(i for i, m in enumerate(statements) if "pg_advisory_unlock" in m)
        assert statements.count("Sync") == 3 and lock < statements.index("Sync") < unlock, queued
        assert "Flush" not in queued[: len(queued) - queued[::-1].index("Sync")], queued
        assert store.task("t").used.models == 2  # type: ignore[union-attr]
        held = store._cursor().execute(
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        assert held.fetchone()["n"] == 0, "the lock is released after the step"

        # another session holds the task's lock: the step waits for it, then runs
        with psycopg.connect(libpq_url(pg_schema_url), autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", [key])
            done = threading.Event()
            worker = threading.Thread(target=lambda: (store.reserve_turn("t"), done.set()))
            worker.start()
            worker.join(0.3)
            assert not done.is_set(), "a queued step waits for the task's lock"
            holder.execute("SELECT pg_advisory_unlock(%s)", [key])
            worker.join(10)
            assert done.is_set()
        assert store.task("t") is not None and store.task("t").used.models == 3  # type: ignore[union-attr]


def test_a_process_that_exits_without_closing_its_store_writes_its_deferred_rows(sql_url: str) -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from agents_loopguard import Budget\n"
        "from agents_loopguard.store import SQLStore\n"
        "from agents_loopguard.store.base import TraceEntry\n"
        "store = SQLStore(sys.argv[1])\n"
        "store.ensure_task('t', Budget(model_turns=9, tool_executions=9))\n"
        "store.append_trace('t', TraceEntry(kind='model', result_class='answered'))\n"
    )
    subprocess.run([sys.executable, "-c", script, sql_url], check=True, timeout=60)
    with SQLStore(sql_url, readonly=True) as reader:
        assert [(e.seq, e.result_class) for e in reader.trace("t")] == [(1, "answered")]


def test_a_reads_result_is_read_at_once_here_and_elsewhere_after_the_next_step(sql_url: str) -> None:
    with SQLStore(sql_url) as store, SQLStore(sql_url) as other:
        store.ensure_task("t", BIG)
        assert store.reserve_turn("t").granted and store.reserve_execution("t", "fp", max_repeats=9).granted
        progress = store.record_execution("t", TraceEntry(kind="tool", result_class="ok"), revision=3)
        assert (progress.revision, progress.stalled, progress.used.tools) == (3, 0, 1)
        assert other.task("t").revision == 0, "not written yet: no transaction of its own"  # type: ignore[union-attr]
        assert store.reserve_turn("t").granted  # written with this step, before it
        assert other.task("t").revision == 3  # type: ignore[union-attr]
        assert [e.result_class for e in other.trace("t")] == ["reserved", "ok", "reserved"]
        store.record_execution("t", TraceEntry(kind="tool", result_class="ok"), revision=3)
        assert store.task("t").stalled == 1, "this store reads its own results at once"  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["write", "page"])
def test_a_writes_answer_and_a_pages_keys_are_steps_of_their_own(sql_url: str, kind: str) -> None:
    with SQLStore(sql_url) as store:
        store.ensure_task("t", BIG)
        store.reserve_turn("t")
        answer = ("op", OperationState.COMMITTED, {"ok": 1}) if kind == "write" else None
        if answer is not None:
            store.reserve_write("t", "op", "fp-op", "pay", max_repeats=9)
        seen = ["cursor:c1"] if kind == "page" else []
        messages = sent(
            store, lambda: store.record_execution("t", TraceEntry(kind="tool"), revision=1, operation=answer, seen=seen)
        )
        assert messages.count("BEGIN IMMEDIATE" if store.backend == "sqlite" else "Sync") == 1, messages


def test_the_outcome_is_one_step_after_a_turn_without_a_flush_transaction(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        guard = Guard(budget=BIG, store=store, task_id="t")
        turn(guard, 1)
        verdict = Verdict(Status.COMPLETED, Reason.VALIDATED_DONE, "done")
        if store.backend == "sqlite":
            messages = sent(store, lambda: guard.end(verdict))
            assert messages.count("BEGIN IMMEDIATE") == 1, messages  # the outcome's; the counters read as they are
        else:
            assert round_trips(store, lambda: guard.end(verdict)) == 2  # the counters' read, the outcome
        assert guard.outcome is not None and guard.outcome.revision == 1 and guard.outcome.used.tools == 1
        assert [e.result_class for e in store.trace("t")] == ["reserved", "answered", "ok"]
        assert store.task("t").revision == 1  # type: ignore[union-attr]


def test_no_transaction_is_held_between_the_steps_of_a_turn(sql_url: str) -> None:
    """What is deferred waits in this process, not in an open transaction: another worker can write at every
    point of a turn where a model call or a tool runs."""
    with SQLStore(sql_url) as store:
        guard = Guard(budget=BIG, store=store, task_id="t")

        def idle() -> None:
            if store.backend == "sqlite":
                assert not store._cursor().connection.in_transaction
                path = store._db.path
                probe = sqlite3.connect(str(path), timeout=0, isolation_level=None)
                probe.execute("BEGIN IMMEDIATE")  # the write lock is free now
                probe.execute("ROLLBACK")
                probe.close()
            else:
                assert store._cursor().connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

        for i in range(1, 3):
            assert guard.begin_turn() is None
            idle()  # the model call
            guard.record_model_answer("answered")
            ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": i}})
            assert isinstance(ticket, Ticket)
            idle()  # the tool
            assert (
                guard.settle(ticket, {"status": "ok"}, evidence={"revision": i, "done": False, "effect": "none"})
                is None
            )
            idle()  # the next model call, the read's result deferred


RESULT = st.tuples(st.one_of(st.none(), st.integers(0, 6)), st.booleans())
"""A read's result: the revision its verify proved (None: unverified), and whether it was a pending poll."""


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(results=st.lists(RESULT, min_size=1, max_size=8))
def test_a_deferred_reads_progress_is_what_the_store_then_records(
    sql_url: str, results: list[tuple[int | None, bool]]
) -> None:
    """The progress a SQLStore answers for a deferred read equals a MemoryStore's, read after read, and what the
    database holds once written equals it too."""
    task = f"t-{uuid.uuid4().hex[:8]}"
    with SQLStore(sql_url) as sql:
        stores: list[Store] = [sql, MemoryStore()]
        answers: list[list[tuple[int, int, int]]] = [[], []]
        for store, answered in zip(stores, answers, strict=True):
            store.ensure_task(task, BIG)
            for n, (revision, pending) in enumerate(results):
                assert store.reserve_turn(task).granted
                assert store.reserve_execution(task, f"fp-{n}", max_repeats=9).granted
                entry = TraceEntry(kind="tool", result_class="ok")
                p = store.record_execution(task, entry, revision=revision, pending=pending)
                answered.append((p.revision, p.stalled, p.used.tools))
        assert answers[0] == answers[1]
        stored = sql.task(task)
        assert stored is not None and (stored.revision, stored.stalled) == answers[1][-1][:2]


def test_one_read_result_per_reservation_waits_for_the_next_step(sql_url: str) -> None:
    """Results recorded without a reservation between them (parallel calls, a caller of its own) are steps of their
    own after the first: what waits for the next step stays one result per reservation."""
    with SQLStore(sql_url) as store:
        store.ensure_task("t", BIG)
        store.reserve_execution("t", "fp-a", max_repeats=9)
        store.reserve_execution("t", "fp-b", max_repeats=9)
        first = sent(store, lambda: store.record_execution("t", TraceEntry(kind="tool"), revision=1))
        second = sent(store, lambda: store.record_execution("t", TraceEntry(kind="tool"), revision=1))
        assert first == [] and len(second) > 0, (first, second)
        stored = store.task("t")
        assert stored is not None and (stored.revision, stored.stalled) == (1, 1)
