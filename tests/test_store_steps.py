"""What one guarded turn costs the database, pinned: transactions on SQLite, round trips on PostgreSQL; and how the
store saves them: trace rows written with the next step, workers queued on a contended task (PostgreSQL)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from agents_loopguard import Budget, Guard
from agents_loopguard.engine.calls import Ticket
from agents_loopguard.store import SQLStore, StoreError
from agents_loopguard.store.base import TraceEntry
from agents_loopguard.store.sql.connection import _lock_key
from tests.conftest import libpq_url
from tests.support.store_trace import round_trips, sent

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


def test_a_full_turn_is_three_transactions_on_sqlite_and_three_round_trips_on_postgresql(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        guard = Guard(budget=BIG, store=store, task_id="t")
        turn(guard, 1)  # warm: connection, schema
        messages = sent(store, lambda: turn(guard, 2))
        if store.backend == "sqlite":
            # the model's answer is written in the tool reservation's transaction: no transaction of its own
            assert messages.count("BEGIN IMMEDIATE") == 3 and messages.count("COMMIT") == 3, messages
        else:
            # one statement per step, the answer's trace row pipelined with the tool reservation's
            assert messages.count("Sync") + messages.count("Query") == 3, messages
        kinds = [(e.kind, e.result_class) for e in store.trace("t")]
        assert kinds == [("model", "reserved"), ("model", "answered"), ("tool", "ok")] * 2
        if store.backend == "postgresql":
            assert round_trips(store, lambda: turn(guard, 3)) == 3


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
        queued = sent(store, lambda: store.reserve_turn("t"))
        # lock | the step | unlock: three transactions, sent in one pipeline (all before any answer is awaited)
        assert queued.count("Sync") == 3 and queued.index("Flush") > max(i for i, m in enumerate(queued) if m == "Sync")
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
