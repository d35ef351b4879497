"""The store's guarantees across real OS processes, on SQLite and on PostgreSQL.

Each worker is a separate Python process (tests/workers/store_worker.py) running real Guards on its own SQLStore.
Executions are counted from the workers' own log files, every line of them, not sampled and not read back from the
store that is under test.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from agents_loopguard import Budget, Guard, Reason
from agents_loopguard.store import OperationState, SQLStore
from tests.support.processes import Worker, prepared, shared_barrier, start_together

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

WORKERS = 4


def test_racing_workers_execute_each_operation_exactly_once(sql_url: str, tmp_path: Path) -> None:
    """Rules: R10 (writes and the ledger), R16 (many workers)."""
    url, operations = prepared(sql_url), 500
    workers = [
        Worker(
            tmp_path,
            f"race-{n}",
            "race",
            url=url,
            worker=n,
            workers=WORKERS,
            operations=operations,
            go=str(tmp_path / "go"),
        )
        for n in range(WORKERS)
    ]
    start_together(tmp_path, workers)
    results = [w.finish() for w in workers]

    executed: dict[str, str] = {}  # op -> the receipt of its one execution
    for worker in workers:
        for line in worker.lines():
            op, receipt = line.split()
            assert op not in executed, f"{op} executed twice: {executed[op]} and {receipt}"
            executed[op] = receipt
    assert len(executed) == operations  # every operation executed exactly once, by somebody

    answers: Counter[str] = Counter()
    for n, result in enumerate(results):
        outcomes = result["outcomes"]
        assert len(outcomes) == operations  # every worker accounted for every operation
        answers.update(outcomes.values())
        for op, receipt in result["replayed"].items():
            assert receipt == executed[op], f"worker {n} replayed {op} with another result"
        for op, outcome in outcomes.items():
            assert (outcome == "executed") == executed[op].endswith(f"/w{n}")
    assert answers["executed"] == operations
    assert set(answers) <= {"executed", "replayed", "unknown_commit", "operation_conflict"}
    assert sum(answers.values()) == WORKERS * operations
    assert answers["operation_conflict"] > 0  # the odd worker out's other payload was refused, never executed
    with SQLStore(url) as store:
        ledger = store.operations()
    assert len(ledger) == operations
    assert all(r.state is OperationState.COMMITTED and r.attempts == 1 for r in ledger)
    assert {r.operation_id: r.result["receipt"] for r in ledger} == executed


def test_a_shared_budget_of_n_executions_is_never_exceeded(sql_url: str, tmp_path: Path) -> None:
    """Rules: R2 (separate counters), R16 (many workers)."""
    url, limit = prepared(sql_url), 120
    go, took = str(tmp_path / "go"), shared_barrier(tmp_path, WORKERS)
    workers = [
        Worker(tmp_path, f"budget-{n}", "budget", url=url, task="shared", limit=limit, worker=n, go=go, **took)
        for n in range(WORKERS)
    ]
    start_together(tmp_path, workers)
    results = [w.finish() for w in workers]
    grants = [int(line) for w in workers for line in w.lines()]
    assert len(grants) == limit  # exactly N executions happened, never N+1
    assert sorted(grants) == list(range(1, limit + 1))  # and each unit of the budget was taken once
    assert [r["reason"] for r in results] == ["tool_budget"] * WORKERS
    # the workers really did share the budget: each took a unit (the barrier makes this certain, not likely)
    assert all(w.lines() for w in workers)
    with SQLStore(url) as store:
        task = store.task("shared")
    assert task is not None and task.used.tools == limit


def test_a_per_tool_limit_shared_by_workers_is_never_exceeded(sql_url: str, tmp_path: Path) -> None:
    """Rules: R2 (separate counters), R16 (many workers)."""
    url, limit = prepared(sql_url), 60
    with SQLStore(url) as store:
        store.ensure_task("mail", Budget(model_turns=0, tool_executions=10**6))
    go, took = str(tmp_path / "go"), shared_barrier(tmp_path, WORKERS)
    workers = [
        Worker(tmp_path, f"tool-{n}", "tool_limit", url=url, task="mail", limit=limit, worker=n, go=go, **took)
        for n in range(WORKERS)
    ]
    start_together(tmp_path, workers)
    results = [w.finish() for w in workers]
    lines = [line.split() for w in workers for line in w.lines()]
    mails = [int(n) for tool, n in lines if tool == "send_email"]
    searches = [int(n) for tool, n in lines if tool == "search"]
    assert len(mails) == limit  # exactly the limit, never one more
    assert [r["reason"] for r in results] == ["tool_limit"] * WORKERS
    assert len(searches) == WORKERS  # the other tool still ran, once per worker
    assert sorted(mails + searches) == list(range(1, limit + WORKERS + 1))  # each execution counted once
    assert all(any(line.startswith("send_email") for line in w.lines()) for w in workers)  # each took some
    with SQLStore(url) as store:
        task = store.task("mail")
        refused = store.reserve_execution("mail", "late", max_repeats=2, tool_limit=("send_email", limit))
    assert task is not None and task.used.tools == limit + WORKERS
    assert refused.reason is Reason.TOOL_LIMIT and str(limit) in refused.detail


def test_no_reservation_succeeds_after_the_stop_mark_commits(sql_url: str, tmp_path: Path) -> None:
    """The stop statement sets the mark and reads the counters in one atomic step, and counters only grow by a
    grant; so if any reservation were granted after the mark's commit, a counter would end above the one read with
    the mark, or some grant would carry a larger number.

    Rules: R3 (shared stop mark), R16 (many workers).
    """
    url = prepared(sql_url)
    with SQLStore(url) as store:
        store.ensure_task("busy", Budget(model_turns=10**6, tool_executions=10**6))
    go = str(tmp_path / "go")
    workers = [Worker(tmp_path, f"loop-{n}", "stop_loop", url=url, task="busy", worker=n, go=go) for n in range(3)]
    stop = Worker(tmp_path, "stopper", "stopper", url=url, task="busy", after=40, go=go)
    start_together(tmp_path, [*workers, stop])
    at_stop = stop.finish()
    results = [w.finish() for w in workers]

    granted: dict[str, list[int]] = {"turn": [], "tool": []}
    for worker in workers:
        for line in worker.lines():
            kind, count = line.split()
            granted[kind].append(int(count))
    assert at_stop["tools"] >= 40 and at_stop["stop_reason"] == "operator: stop"
    assert sorted(granted["tool"]) == list(range(1, at_stop["tools"] + 1))
    assert sorted(granted["turn"]) == list(range(1, at_stop["models"] + 1))
    for result in results:  # every worker went on until the mark refused it, and then stopped
        assert result["refusal"]["reason"] == "stop_requested"
    with SQLStore(url) as store:
        task = store.task("busy")
    assert task is not None
    assert (task.used.models, task.used.tools) == (at_stop["models"], at_stop["tools"])


def test_a_write_killed_in_flight_stays_unknown_and_is_never_resent(sql_url: str, tmp_path: Path) -> None:
    """Rules: R10 (writes and the ledger), R16 (many workers)."""
    url = prepared(sql_url)
    call = {"tool": "pay", "kind": "write", "operation_id": "invoice-77-pay", "args": {"invoice": 77, "amount": 120}}
    victim = Worker(tmp_path, "victim", "hang_write", url=url, task="payments", call=call)
    victim.wait_ready()  # it is inside execute: reserved, not yet recorded
    os.kill(victim.proc.pid, signal.SIGKILL)
    assert victim.proc.wait(timeout=30) == -signal.SIGKILL
    assert victim.lines() == ["executing"]

    with SQLStore(url) as store:
        record = store.lookup_operation("invoice-77-pay")
    assert record is not None and record.state is OperationState.UNKNOWN and record.attempts == 1

    nxt = Worker(tmp_path, "next", "retry_write", url=url, task="payments", call=call)
    answers = nxt.finish()["answers"]
    assert nxt.lines() == []  # the next workers did not execute it
    for answer in answers.values():
        assert answer == {"status": "needs_reconciliation", "reason": "unknown_commit", "op": "invoice-77-pay"}
    with SQLStore(url) as store:
        after = store.lookup_operation("invoice-77-pay")
    assert after is not None and after.state is OperationState.UNKNOWN and after.attempts == 1


def _wait_for(worker: Worker, line: str) -> None:
    deadline = time.monotonic() + 60
    while line not in worker.lines():
        assert worker.proc.poll() is None, worker.stderr.read_text()
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_another_worker_sees_a_reads_result_one_step_later(sql_url: str, tmp_path: Path) -> None:
    """A read's result rides with the worker's next step: until then another process sees the execution counted
    but not its result; after that step, both. Rules: R6 (progress), R16 (many workers)."""
    url = prepared(sql_url)
    reader = Worker(
        tmp_path, "reader", "read_then_step", url=url, task="t", go=str(tmp_path / "go"), done=str(tmp_path / "done")
    )
    reader.wait_ready()  # its read is settled (its guard is at revision 5), its next step not taken
    with SQLStore(url, readonly=True) as other:
        before = other.task("t")
        assert before is not None and (before.used.models, before.used.tools, before.revision) == (1, 1, 0)
        assert [e.result_class for e in other.trace("t")] == ["reserved"]
        (tmp_path / "go").touch()
        _wait_for(reader, "stepped")
        after = other.task("t")
        assert after is not None and (after.used.models, after.used.tools, after.revision) == (2, 1, 5)
        assert [(e.kind, e.result_class) for e in other.trace("t")] == [
            ("model", "reserved"),
            ("tool", "ok"),
            ("model", "reserved"),
        ]
    (tmp_path / "done").touch()
    assert reader.finish() == {"revision": 5}


def test_a_worker_killed_after_a_read_loses_only_that_reads_result(sql_url: str, tmp_path: Path) -> None:
    """SIGKILL between a read's result and the next step: the execution stays counted (it was reserved before it
    ran), the result was never written, and the next worker goes on from the stored revision. Rules: R2, R16."""
    url = prepared(sql_url)
    victim = Worker(tmp_path, "victim", "read_then_step", url=url, task="t", hang=True)
    victim.wait_ready()
    os.kill(victim.proc.pid, signal.SIGKILL)
    assert victim.proc.wait(timeout=30) == -signal.SIGKILL
    with SQLStore(url) as store:
        task = store.task("t")
        assert task is not None and (task.used.models, task.used.tools, task.revision) == (1, 1, 0)
        guard = Guard(budget=Budget(model_turns=10, tool_executions=10), store=store, task_id="t")
        assert guard.begin_turn() is None and guard.used.tools == 1 and guard.used.models == 2
