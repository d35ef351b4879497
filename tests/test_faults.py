"""Faults end clean (issue 12): a write's result is stored exactly or refused; a worker that loses the race to
finish a task reports the outcome the store kept; details never quote a bad value.

R10 (the ledger stores a committed write's result, returned on replay), R11 (one sticky outcome per task), R16
(many workers: the first outcome wins).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from agents_loopguard import Budget, Guard, OperationState, Reason, Status, Verdict
from agents_loopguard.store import SQLStore, Store

COMMITTED = {"revision": 1, "done": False, "effect": "committed"}


def pay(op: str, amount: int = 5) -> dict[str, Any]:
    return {"tool": "pay", "kind": "write", "operation_id": op, "args": {"amount": amount}}


def cyclic() -> dict[str, Any]:
    receipt: dict[str, Any] = {"status": "ok", "receipt": "r-1"}
    receipt["self"] = receipt
    return receipt


@pytest.mark.parametrize(
    "result",
    [{"status": "ok", "amount": math.nan}, {"status": "ok", "amount": math.inf}, cyclic(), {"status": "ok", 1: "x"}],
    ids=["nan", "infinity", "cycle", "non-string key"],
)
def test_r10_a_write_whose_result_is_not_json_is_invalid_result_and_stays_unknown(store: Store, result: Any) -> None:
    guard = Guard(budget=Budget(3, 3), store=store, task_id="t-json")
    guard.begin_turn()
    ticket = guard.authorize(pay("inv-1"))
    assert not isinstance(ticket, Verdict)
    verdict = guard.settle(ticket, result, evidence=COMMITTED)
    assert verdict is not None
    assert (verdict.status, verdict.reason, verdict.operation_id) == (
        Status.NEEDS_RECONCILIATION,
        Reason.INVALID_RESULT,
        "inv-1",
    )
    assert verdict.detail.startswith("the write's result (a dict of")  # names the type and size, not the value
    assert "r-1" not in verdict.detail
    (operation,) = store.operations("t-json")
    assert operation.state is OperationState.UNKNOWN  # nothing was stored transformed


def test_r10_a_replay_returns_exactly_the_result_that_was_stored(store: Store) -> None:
    result = {"status": "ok", "receipt": "r-9", "lines": [1, 2.5, "x"], "meta": {"b": None, "a": True}}
    first = Guard(budget=Budget(3, 3), store=store, task_id="t-a")
    first.begin_turn()
    ticket = first.authorize(pay("inv-2"))
    assert not isinstance(ticket, Verdict)
    assert first.settle(ticket, result, evidence=COMMITTED) is None
    second = Guard(budget=Budget(3, 3), store=store, task_id="t-b")
    second.begin_turn()
    replay = second.authorize(pay("inv-2"))
    assert not isinstance(replay, Verdict) and replay.replay
    assert replay.result == result


def test_r16_a_worker_that_loses_the_race_to_finish_reports_the_stored_outcome(store: Store) -> None:
    one = Guard(budget=Budget(5, 5), store=store, task_id="t-race")
    two = Guard(budget=Budget(5, 5), store=store, task_id="t-race")
    done = one.end(Verdict(Status.COMPLETED, Reason.VALIDATED_DONE, "verified"))
    refused = two.begin_turn()  # the other worker finished it: refused with that reason, not as a stop mark
    assert refused is not None and (refused.reason, refused.detail) == (Reason.TASK_FINISHED, "task already completed")
    late = two.end(refused)
    assert (late.status, late.reason, late.detail) == (done.status, done.reason, done.detail)
    assert store.task("t-race").outcome["status"] == "completed"  # type: ignore[union-attr]


# --- commands that only read never create or alter anything (issue 12) -------------------------------------------


def loopguard_cli(*args: str) -> Any:
    """The command (in this process: nothing here is about the process)."""
    from tests.support.cli import in_process

    return in_process(args)


def test_a_read_command_on_a_missing_store_says_so_and_creates_nothing(tmp_path: Any) -> None:
    missing = tmp_path / "typo" / "x.db"
    done = loopguard_cli("--db", f"sqlite:///{missing}", "tasks")
    assert done.returncode == 2 and "no loopguard store at" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "typo").exists()


def test_a_read_command_on_an_unrelated_database_refuses_and_leaves_it_unchanged(tmp_path: Any) -> None:
    import sqlite3

    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    before = path.read_bytes()
    done = loopguard_cli("--db", f"sqlite:///{path}", "tasks")
    assert done.returncode == 2 and "loopguard" in done.stderr
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables == ["customers"]


def test_a_read_only_store_can_still_be_inspected(tmp_path: Any) -> None:
    import os

    from agents_loopguard.store import SQLStore

    path = tmp_path / "ro" / "lg.db"
    path.parent.mkdir()
    with SQLStore(f"sqlite:///{path}") as store:
        guard = Guard(budget=Budget(2, 2), store=store, task_id="t-ro")
        guard.end(Verdict(Status.STOPPED, Reason.MODEL_BUDGET, "limit"))
    os.chmod(path, 0o444)
    os.chmod(path.parent, 0o555)
    try:
        shown = loopguard_cli("--db", f"sqlite:///{path}", "--json", "show", "t-ro")
        assert shown.returncode == 0, shown.stderr
        assert '"t-ro"' in shown.stdout
    finally:
        os.chmod(path.parent, 0o755)


@pytest.mark.slow
def test_a_ledger_and_receiver_disagreement_has_a_way_forward_from_the_command_line(tmp_path: Any) -> None:
    """Issue 12: a committed write replayed while verify answers unknown ends needs_reconciliation; reconcile used
    to refuse ("already committed") and recover too ("reconcile first"): no way forward. Now an operator confirms,
    or corrects with --correct, and the task moves on."""
    import json

    from agents_loopguard import create_runner
    from agents_loopguard.store import SQLStore

    url = f"sqlite:///{tmp_path / 'lg.db'}"
    with SQLStore(url) as store:
        paid = create_runner(
            budget=Budget(3, 3),
            store=store,
            task_id="t-pay",
            execute=lambda c: {"status": "ok"},
            verify=lambda c, r: COMMITTED,
        )
        paid([pay("inv-9")])
        unsure = {"revision": 1, "done": False, "effect": "unknown"}
        later = create_runner(
            budget=Budget(3, 3),
            store=store,
            task_id="t-again",
            execute=lambda c: {"status": "ok"},
            verify=lambda c, r: unsure,
        )
        stuck = later([pay("inv-9")])
        assert (stuck.status, stuck.reason) == (Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT)
        # the detail says what disagrees: the ledger's committed against the receiver's answer now
        assert "holds operation 'inv-9' as committed" in stuck.detail and "verify now says unknown" in stuck.detail
        assert "reconcile --correct" in stuck.detail
    refused = loopguard_cli("--db", url, "reconcile", "inv-9", "not_committed", "--who", "ops")
    assert refused.returncode == 1 and "committed" in refused.stderr  # a state refusal that says what disagrees
    confirmed = loopguard_cli("--db", url, "--json", "reconcile", "inv-9", "committed", "--who", "ops", "--why", "seen")
    assert confirmed.returncode == 0, confirmed.stderr
    assert json.loads(confirmed.stdout)["reopened_tasks"] == ["t-again"]  # the replayer may go on
    with SQLStore(url) as store:
        assert [t.kind for t in store.transitions("t-pay")] == ["confirm"]  # the answer, recorded with who and why
        assert [t.kind for t in store.transitions("t-again")] == ["reconcile"]  # the replayer reopened by it
        assert store.task("t-again").status == "running"  # type: ignore[union-attr]


def test_a_budget_passed_for_an_existing_task_keeps_the_stored_one_and_says_so(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    from agents_loopguard import StateError

    Guard(budget=Budget(model_turns=4, tool_executions=2), store=store, task_id="t-budget")
    with caplog.at_level("WARNING", logger="agents_loopguard"):
        again = Guard(budget=Budget(model_turns=40, tool_executions=2), store=store, task_id="t-budget")
    assert again.budget.model_turns == 4  # never replaced silently, never extended without a record
    (warning,) = [r for r in caplog.records if "keeps its stored budget" in r.getMessage()]
    assert "model_turns 4 (asked 40)" in warning.getMessage() and "loopguard recover" in warning.getMessage()
    with pytest.raises(StateError, match="keeps its stored budget"):
        Guard(budget=Budget(model_turns=40, tool_executions=2), store=store, task_id="t-budget", strict_budget=True)
    quiet = Guard(budget=Budget(model_turns=4, tool_executions=2), store=store, task_id="t-budget")
    assert quiet.budget.model_turns == 4


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_r16_two_worker_processes_ending_one_task_both_report_the_stored_outcome(sql_url: str, tmp_path: Any) -> None:
    """Two OS processes end the same task at once with different verdicts: one wins, and the loser reports what the
    store kept (the winner's outcome), never its own; each guard then stays ended with the kept outcome."""
    from tests.support.processes import Worker, prepared, start_together

    url = prepared(sql_url)
    verdicts = [("completed", "validated_done"), ("stopped", "no_progress")]
    workers = [
        Worker(
            tmp_path, f"w{i}", "finish", url=url, go=str(tmp_path / "go"), task="t-race", worker=i, status=s, reason=r
        )
        for i, (s, r) in enumerate(verdicts)
    ]
    start_together(tmp_path, workers)
    results = [w.finish() for w in workers]
    with SQLStore(url) as store:
        stored = store.task("t-race").outcome  # type: ignore[union-attr]
    kept = [stored["status"], stored["reason"], stored["detail"]]
    assert kept in ([*verdicts[0], "worker 0"], [*verdicts[1], "worker 1"])
    assert [r["outcome"] for r in results] == [kept, kept]
    assert [r["next_turn"] for r in results] == [[kept[1], "the guard has already ended"]] * 2
