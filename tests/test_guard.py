"""The engine's own rules beyond the prototype: polls, pages, stop mark, thresholds, outcomes and records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents_loopguard import Budget, Guard, MemoryStore, Outcome, Policy, Reason, RecoveryRecord, Status, Usage, Verdict
from agents_loopguard.values.calls import Ticket
from agents_loopguard.values.outcome import RecordError, allowed_next_actions


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def step(guard: Guard, proposal: Any, result: Any, evidence: Any) -> Verdict | None:
    """One model turn proposing one call, executed and verified."""
    refused = guard.begin_turn()
    if refused:
        return refused
    ticket = guard.authorize(proposal)
    if isinstance(ticket, Verdict):
        return ticket
    out = ticket.result if ticket.replay else result
    return guard.settle(ticket, out, lambda call, res: evidence)


POLL = {"tool": "job_status", "kind": "poll", "args": {"job": "j-1"}}
OK = {"status": "ok"}


def test_pending_polls_are_not_stalls_and_are_bounded_by_their_own_policy() -> None:
    """Rules: R8 (polling)."""
    guard = Guard(budget=Budget(model_turns=50, tool_executions=50), policy=Policy(max_polls=5, max_stalled=2))
    pending = {"revision": 0, "done": False, "effect": "none", "pending": True}
    verdicts = [step(guard, POLL, OK, pending) for _ in range(6)]
    assert verdicts[:5] == [None] * 5, "five pending polls are allowed, more than max_stalled=2 would allow"
    assert verdicts[5] is not None and verdicts[5].reason is Reason.WAIT_BUDGET
    assert guard.store.task(guard.task_id).used.tools == 5, "every poll counted against the total budget"


def test_poll_wait_policy_by_time_and_polls_count_in_the_total_budget() -> None:
    """Rules: R8 (polling), R2 (separate counters)."""
    clock = Clock()
    guard = Guard(budget=Budget(model_turns=50, tool_executions=50), clock=clock, policy=Policy(max_wait=10.0))
    pending = {"revision": 0, "done": False, "effect": "none", "pending": True}
    assert step(guard, POLL, OK, pending) is None
    clock.t = 9.0
    assert step(guard, POLL, OK, pending) is None
    clock.t = 10.0
    verdict = step(guard, POLL, OK, pending)
    assert verdict is not None and verdict.reason is Reason.WAIT_BUDGET


def test_poll_that_finishes_the_job_is_progress() -> None:
    """Rules: R8 (polling)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10))
    pending = {"revision": 0, "done": False, "effect": "none", "pending": True}
    for _ in range(3):
        assert step(guard, POLL, OK, pending) is None
    assert step(guard, POLL, {"status": "ok", "job": "finished"}, {"revision": 1, "done": True, "effect": "none"})
    assert guard.revision == 1


def test_tool_budget_holds_for_polls() -> None:
    """Rules: R8 (polling), R2 (separate counters)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=2), policy=Policy(max_polls=10))
    pending = {"revision": 0, "done": False, "effect": "none", "pending": True}
    assert [step(guard, POLL, OK, pending) for _ in range(2)] == [None, None]
    verdict = step(guard, POLL, OK, pending)
    assert verdict is not None and verdict.reason is Reason.TOOL_BUDGET


def page(cursor: str | None) -> dict[str, Any]:
    return {"tool": "list_orders", "kind": "page", "args": {"cursor": cursor}}


def test_a_cursor_seen_before_is_a_cycle_even_when_revision_advances() -> None:
    """Rules: R9 (pagination)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10))
    assert (
        step(
            guard,
            page(None),
            OK,
            {"revision": 1, "done": False, "effect": "none", "cursor": "c2", "records": ["o1", "o2"]},
        )
        is None
    )
    assert (
        step(guard, page("c2"), OK, {"revision": 2, "done": False, "effect": "none", "cursor": "c3", "records": ["o3"]})
        is None
    )
    verdict = step(
        guard, page("c3"), OK, {"revision": 3, "done": False, "effect": "none", "cursor": "c2", "records": ["o4"]}
    )
    assert verdict is not None and (verdict.status, verdict.reason) == (Status.STOPPED, Reason.CURSOR_CYCLE)


def test_a_page_of_records_already_seen_is_a_cycle_with_a_new_cursor() -> None:
    """Rules: R9 (pagination)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10))
    assert (
        step(
            guard,
            page(None),
            OK,
            {"revision": 1, "done": False, "effect": "none", "cursor": "c2", "records": ["o1", "o2"]},
        )
        is None
    )
    verdict = step(
        guard,
        page("c2"),
        OK,
        {"revision": 2, "done": False, "effect": "none", "cursor": "c-new", "records": ["o2", "o1"]},
    )
    assert verdict is not None and verdict.reason is Reason.CURSOR_CYCLE


def test_new_cursor_without_new_revision_is_not_progress() -> None:
    """Rules: R9 (pagination)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10), policy=Policy(max_stalled=2))
    assert (
        step(guard, page(None), OK, {"revision": 0, "done": False, "effect": "none", "cursor": "a", "records": ["1"]})
        is None
    )
    verdict = step(
        guard, page("a"), OK, {"revision": 0, "done": False, "effect": "none", "cursor": "b", "records": ["2"]}
    )
    assert verdict is not None and verdict.reason is Reason.NO_PROGRESS


def test_stop_mark_refuses_the_next_turn_and_the_next_execution() -> None:
    """Rules: R3 (shared stop mark)."""
    store = MemoryStore()
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10), store=store, task_id="t-stop")
    assert guard.begin_turn() is None
    store.request_stop("t-stop", "operator")
    ticket = guard.authorize({"tool": "search", "kind": "read", "args": {}})
    assert isinstance(ticket, Verdict) and ticket.reason is Reason.STOP_REQUESTED
    again = guard.begin_turn()
    assert again is not None and again.reason is Reason.STOP_REQUESTED
    assert store.task("t-stop").used.tools == 0


def test_thresholds_are_configurable() -> None:
    """Rules: R7 (repetition and stall)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10), policy=Policy(max_same_call=1))
    read = {"tool": "search", "kind": "read", "args": {"q": "x"}}
    none = {"revision": 0, "done": False, "effect": "none"}
    assert step(guard, read, OK, none) is None
    verdict = step(guard, read, OK, none)
    assert verdict is not None and verdict.reason is Reason.SAME_CALL


def test_changed_arguments_are_not_progress() -> None:
    """Rules: R6 (progress is decided by the application)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10))
    none = {"revision": 0, "done": False, "effect": "none"}
    verdicts = [step(guard, {"tool": "search", "kind": "read", "args": {"q": f"v{i}"}}, OK, none) for i in range(3)]
    assert verdicts[2] is not None and verdicts[2].reason is Reason.NO_PROGRESS


def test_model_claiming_done_in_its_result_is_not_done() -> None:
    """Rules: R6 (progress is decided by the application)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10))
    claims = {"status": "ok", "done": True, "progress": "I made progress", "revision": 99}
    verdict = step(
        guard, {"tool": "t", "kind": "read", "args": {}}, claims, {"revision": 0, "done": False, "effect": "none"}
    )
    assert verdict is None and guard.revision == 0


def test_a_guard_on_a_finished_task_returns_its_stored_outcome() -> None:
    store = MemoryStore()
    first = Guard(budget=Budget(model_turns=1, tool_executions=1), store=store, task_id="t-done")
    outcome = first.finish(Status.STOPPED, Reason.NO_PROGRESS, "loop")
    second = Guard(budget=Budget(model_turns=100, tool_executions=100), store=store, task_id="t-done")
    assert second.outcome == outcome.record().to_outcome()
    assert second.budget.model_turns == 1, "an existing task keeps its budget"
    verdict = second.begin_turn()
    assert verdict is not None and verdict.reason is Reason.NO_PROGRESS
    assert second.end(Verdict(Status.COMPLETED, Reason.VALIDATED_DONE)) is second.outcome


def test_end_is_sticky() -> None:
    """Rules: R11 (outcomes)."""
    guard = Guard(budget=Budget(model_turns=1, tool_executions=1))
    first = guard.finish(Status.PARTIAL, Reason.PLAN_EXHAUSTED)
    assert guard.finish(Status.COMPLETED, Reason.VALIDATED_DONE) is first
    assert isinstance(guard.authorize({"tool": "t", "kind": "read", "args": {}}), Verdict)


def test_write_authorization_replays_committed_operation() -> None:
    """Rules: R10 (writes and the ledger)."""
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10))
    save = {"tool": "save", "kind": "write", "operation_id": "op-1", "args": {"amount": 5}}
    assert step(guard, save, {"status": "ok", "id": 1}, {"revision": 1, "done": False, "effect": "committed"}) is None
    guard.begin_turn()
    ticket = guard.authorize(save)
    assert isinstance(ticket, Ticket) and ticket.replay and ticket.result == {"status": "ok", "id": 1}
    assert guard.store.task(guard.task_id).used.tools == 1


# --- outcomes and recovery records ------------------------------------------------------------------------


def test_recovery_record_has_the_article_shape_and_round_trips() -> None:
    """Rules: R14 (recovery record)."""
    outcome = Outcome(
        Status.NEEDS_RECONCILIATION,
        Reason.UNKNOWN_COMMIT,
        task_id="task-42",
        revision=3,
        used=Usage(models=4, tools=2),
        operation_id="order-42-confirm",
    )
    data = json.loads(outcome.record().to_json())
    assert data["task_id"] == "task-42" and data["status"] == "needs_reconciliation"
    assert data["reason"] == "unknown_commit" and data["validated_revision"] == 3
    assert data["used"]["models"] == 4 and data["used"]["tools"] == 2
    assert data["operation_id"] == "order-42-confirm"
    assert data["allowed_next_actions"] == ["query_operation_status", "human_review"]
    assert RecoveryRecord.from_json(json.dumps(data)).to_outcome() == outcome


@pytest.mark.parametrize(
    "status,reason,actions",
    [
        (Status.COMPLETED, Reason.VALIDATED_DONE, ["return_result"]),
        (Status.PARTIAL, Reason.PLAN_EXHAUSTED, ["deliver_verified", "human_review"]),
        (Status.STOPPED, Reason.EXECUTOR_EXCEPTION, ["bounded_retry", "deliver_verified", "close"]),
        (Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT, ["query_operation_status", "human_review"]),
        (Status.NEEDS_HUMAN, Reason.APPROVAL, ["human_review"]),
        (Status.NEEDS_HUMAN, Reason.PERMISSION, ["human_review"]),
        (Status.STOPPED, Reason.TOOL_BUDGET, ["deliver_verified", "close"]),
        (Status.STOPPED, Reason.MAX_TURNS, ["deliver_verified", "close"]),
        (Status.STOPPED, Reason.SAME_CALL, ["deliver_verified", "human_review", "close"]),
    ],
)
def test_allowed_next_actions_follow_from_the_status(status: Status, reason: Reason, actions: list[str]) -> None:
    """Rules: R14 (recovery record)."""
    assert [str(a) for a in allowed_next_actions(status, reason)] == actions


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(status="finished"),
        lambda d: d.update(allowed_next_actions=["bounded_retry"]),
        lambda d: d["used"].update(tools=-1),
        lambda d: d.update(extra="x"),
        lambda d: d.pop("reason"),
    ],
)
def test_tampered_recovery_record_is_refused(mutate: Any) -> None:
    data = Outcome(Status.STOPPED, Reason.SAME_CALL, task_id="t").record().to_dict()
    mutate(data)
    with pytest.raises(RecordError):
        RecoveryRecord.from_json(json.dumps(data))


def test_garbage_record_text_is_refused() -> None:
    with pytest.raises(RecordError):
        RecoveryRecord.from_json("{not json")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model_turns": -1, "tool_executions": 1},
        {"model_turns": 1, "tool_executions": True},
        {"model_turns": 1, "tool_executions": 1, "deadline": float("nan")},
    ],
)
def test_bad_budget_is_a_clear_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Budget"):
        Budget(**kwargs)


def test_budget_extension_only_grows() -> None:
    budget = Budget(model_turns=6, tool_executions=4, cost=1.0)
    assert budget.extended({"model_turns": 2, "cost": 0.5}) == Budget(8, 4, None, 1.5)
    with pytest.raises(ValueError, match="only grow"):
        budget.extended({"tool_executions": -1})
    with pytest.raises(ValueError, match="unknown keys"):
        budget.extended({"tools": 1})


def test_decisions_are_logged_with_the_task_id_and_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    """Rules: R4 (trace)."""
    caplog.set_level("DEBUG", logger="agents_loopguard")
    guard = Guard(budget=Budget(model_turns=5, tool_executions=5), task_id="t-log", secrets=["hunter2"])
    leaky = {"tool": "login", "kind": "read", "args": {"password": "hunter2", "user": "bob"}}
    garbage_evidence = {"revision": "hunter2", "done": False, "effect": "none"}
    verdict = step(guard, leaky, OK, garbage_evidence)
    assert verdict is not None and verdict.reason is Reason.INVALID_EVIDENCE
    outcome = guard.end(verdict)
    assert "hunter2" not in outcome.detail and "hunter2" not in json.dumps(guard.store.task("t-log").outcome)
    step(guard, leaky, OK, garbage_evidence)
    records = [r for r in caplog.records if r.name == "agents_loopguard"]
    assert records and all(getattr(r, "task_id", None) == "t-log" for r in records)
    assert any(getattr(r, "reason", None) == "invalid_evidence" for r in records)
    assert all("hunter2" not in r.getMessage() for r in records)


def test_the_observer_is_told_every_decision_without_arguments_and_cannot_break_the_guard() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    guard = Guard(budget=Budget(model_turns=3, tool_executions=1), observer=lambda e, d: events.append((e, d)))
    secret_call = {"tool": "login", "kind": "read", "args": {"password": "hunter2"}}
    assert step(guard, secret_call, OK, {"revision": 1, "done": False, "effect": "none"}) is None
    verdict = step(guard, {"tool": "other", "kind": "read", "args": {}}, OK, {})
    assert verdict is not None and verdict.reason is Reason.TOOL_BUDGET
    guard.end(verdict)
    names = [e for e, _ in events]
    assert names == ["turn.reserved", "call.authorized", "call.settled", "turn.reserved", "call.refused", "outcome"]
    assert all(d["task_id"] == guard.task_id for _, d in events)
    assert events[-1][1]["reason"] == "tool_budget" and events[2][1]["revision"] == 1
    assert "hunter2" not in json.dumps([d for _, d in events])

    def broken(event: str, data: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    other = Guard(budget=Budget(model_turns=3, tool_executions=3), observer=broken)
    assert step(other, secret_call, OK, {"revision": 1, "done": True, "effect": "none"}) is not None
