"""Reconciliation of unknown writes and explicit recovery of stopped tasks: recorded, never resetting counters."""

from __future__ import annotations

from typing import Any

import pytest

from agents_loopguard import Budget, Guard, MemoryStore, OperationState, Reason, Status, create_runner
from agents_loopguard.ops.recovery import RecoveryError, RecoveryRefused, reconcile, recover
from agents_loopguard.store.base import Store
from agents_loopguard.values.errors import exit_code

PAY = {"tool": "pay", "kind": "write", "operation_id": "inv-7-pay", "args": {"invoice": 7, "amount": 120}}


def lost_payment(store: Store, task_id: str = "t-pay", sent: list[Any] | None = None) -> Any:
    sent = sent if sent is not None else []

    def execute(call: Any) -> Any:
        sent.append(call)
        raise TimeoutError("response lost")

    run = create_runner(
        budget=Budget(model_turns=6, tool_executions=3),
        store=store,
        task_id=task_id,
        execute=execute,
        verify=lambda c, r: None,
    )
    return run([PAY])


def continue_task(store: Store, task_id: str, proposals: list[Any], sent: list[Any]) -> Any:
    def execute(call: Any) -> Any:
        sent.append(call)
        return {"status": "ok", "receipt": "r-2"}

    run = create_runner(
        budget=Budget(model_turns=100, tool_executions=100),
        store=store,
        task_id=task_id,
        execute=execute,
        verify=lambda c, r: {"revision": 1, "done": True, "effect": "committed"},
    )
    return run(proposals)


def test_committed_answer_is_stored_returned_and_the_task_continues() -> None:
    """Rules: R10 (writes and the ledger)."""
    store = MemoryStore()
    sent: list[Any] = []
    first = lost_payment(store, sent=sent)
    assert (first.status, first.reason) == (Status.NEEDS_RECONCILIATION, Reason.EXECUTOR_EXCEPTION)
    rec = reconcile(
        store,
        "inv-7-pay",
        "committed",
        who="ops",
        result={"status": "ok", "receipt": "r-1", "api_key": "sk-live-should-not-stay"},
    )
    assert rec.operation.state is OperationState.COMMITTED and not rec.blocked
    assert rec.transition is not None and rec.transition.from_outcome["reason"] == "executor_exception"
    assert store.task("t-pay").status == "running"
    outcome = continue_task(store, "t-pay", [PAY], sent)
    assert outcome.status is Status.COMPLETED
    assert len(sent) == 1, "the reconciled payment was returned from the ledger, not sent again"
    assert outcome.value["receipt"] == "r-1" and outcome.value["api_key"] == "[redacted]"
    assert store.task("t-pay").used.tools == 1 and store.task("t-pay").budget.tool_executions == 3


def test_not_committed_answer_allows_one_retry_within_the_budget() -> None:
    """Rules: R10 (writes and the ledger)."""
    store = MemoryStore()
    sent: list[Any] = []
    lost_payment(store, sent=sent)
    rec = reconcile(store, "inv-7-pay", OperationState.NOT_COMMITTED, who="ops", why="receiver has no such payment")
    assert [str(a) for a in rec.allowed_next_actions] == ["bounded_retry", "human_review"]
    outcome = continue_task(store, "t-pay", [PAY], sent)
    assert outcome.status is Status.COMPLETED and len(sent) == 2
    assert store.task("t-pay").used.tools == 2, "the retry counted against the same global budget"
    assert store.lookup_operation("inv-7-pay").attempts == 2


def test_still_unknown_stays_blocked_and_nothing_reopens() -> None:
    """Rules: R10 (writes and the ledger)."""
    store = MemoryStore()
    sent: list[Any] = []
    lost_payment(store, sent=sent)
    rec = reconcile(store, "inv-7-pay", "unknown", who="ops")
    assert rec.blocked and rec.transition is None
    assert store.task("t-pay").status == "needs_reconciliation"
    assert store.transitions("t-pay") == []
    again = Guard(budget=Budget(model_turns=9, tool_executions=9), store=store, task_id="t-other")
    again.begin_turn()
    verdict = again.authorize(PAY)
    assert getattr(verdict, "reason", None) is Reason.UNKNOWN_COMMIT, "another task cannot re-send it either"
    assert len(sent) == 1


def test_reconcile_refuses_wrong_ids_and_settled_operations() -> None:
    store = MemoryStore()
    lost_payment(store)
    with pytest.raises(RecoveryError, match="unknown operation"):
        reconcile(store, "nope", "committed", who="ops")
    reconcile(store, "inv-7-pay", "committed", who="ops")
    with pytest.raises(RecoveryError, match="already committed"):
        reconcile(store, "inv-7-pay", "not_committed", who="ops")
    with pytest.raises(ValueError):
        reconcile(store, "inv-7-pay", "maybe", who="ops")


def test_task_with_two_unknown_writes_reopens_only_when_both_are_answered() -> None:
    store = MemoryStore()
    guard = Guard(budget=Budget(model_turns=9, tool_executions=9), store=store, task_id="t-two")
    for op in ("op-a", "op-b"):
        guard.begin_turn()
        ticket = guard.authorize({"tool": "save", "kind": "write", "operation_id": op, "args": {"op": op}})
        guard.fail(ticket, TimeoutError())  # type: ignore[arg-type]
    guard.finish(Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT)
    assert reconcile(store, "op-a", "committed", who="ops").transition is None
    assert store.task("t-two").status == "needs_reconciliation"
    assert reconcile(store, "op-b", "not_committed", who="ops").transition is not None
    assert store.task("t-two").status == "running"


def test_recover_extends_explicitly_and_never_resets_counters() -> None:
    """Rules: R13 (approval pauses), R14 (recovery record)."""
    store = MemoryStore()
    run = create_runner(
        budget=Budget(model_turns=2, tool_executions=5),
        store=store,
        task_id="t-r",
        execute=lambda c: {"status": "ok"},
        verify=lambda c, r: {"revision": len(c["args"]["q"]), "done": False, "effect": "none"},
    )
    first = run([{"tool": "s", "kind": "read", "args": {"q": "a" * i}} for i in range(1, 5)])
    assert (first.status, first.reason, first.used.models) == (Status.STOPPED, Reason.MODEL_BUDGET, 2)
    transition = recover(store, "t-r", who="lead", why="productive, give it two more", extend={"model_turns": 2})
    assert transition.budget_delta == {"model_turns": 2} and transition.from_outcome["reason"] == "model_budget"
    assert run([{"tool": "s", "kind": "read", "args": {"q": "z"}}]) is first, "the finished runner stays finished"
    second = create_runner(
        budget=Budget(model_turns=100, tool_executions=100),
        store=store,
        task_id="t-r",
        execute=lambda c: {"status": "ok"},
        verify=lambda c, r: {"revision": 10 + len(c["args"]["q"]), "done": False, "effect": "none"},
    )
    out = second([{"tool": "s", "kind": "read", "args": {"q": "b" * i}} for i in range(1, 5)])
    assert out.reason is Reason.MODEL_BUDGET and out.used.models == 4, "2 used before + 2 granted, not a fresh 100"


@pytest.mark.parametrize(
    "status,reason,message",
    [
        (Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT, "reconcile"),
        (Status.NEEDS_HUMAN, Reason.APPROVAL, "pause"),
        (Status.COMPLETED, Reason.VALIDATED_DONE, "completed"),
    ],
)
def test_recover_refuses_what_needs_another_decision(status: Status, reason: Reason, message: str) -> None:
    store = MemoryStore()
    guard = Guard(budget=Budget(model_turns=1, tool_executions=1), store=store, task_id="t")
    if status is Status.NEEDS_RECONCILIATION:  # what needs reconciling first: a write whose effect is unknown
        ticket = guard.authorize({"tool": "save", "kind": "write", "operation_id": "op-u", "args": {}})
        guard.fail(ticket, TimeoutError())  # type: ignore[arg-type]
    guard.finish(status, reason)
    with pytest.raises(RecoveryError, match=message):
        recover(store, "t", who="lead", why="try")


def test_recover_needs_who_and_why_and_valid_extension() -> None:
    store = MemoryStore()
    Guard(budget=Budget(model_turns=1, tool_executions=1), store=store, task_id="t").finish(
        Status.STOPPED, Reason.SAME_CALL
    )
    with pytest.raises(RecoveryError, match="who decides"):
        recover(store, "t", who="", why="")
    with pytest.raises(RecoveryError, match="only grow"):
        recover(store, "t", who="lead", why="x", extend={"tool_executions": -5})
    assert store.task("t").status == "stopped", "a refused decision writes nothing"
    with pytest.raises(RecoveryError, match="unknown task"):
        recover(store, "missing", who="lead", why="x")


def test_recover_clears_an_operator_stop_mark_by_decision() -> None:
    store = MemoryStore()
    guard = Guard(budget=Budget(model_turns=5, tool_executions=5), store=store, task_id="t-s")
    store.request_stop("t-s", "operator")
    verdict = guard.begin_turn()
    guard.end(verdict)  # type: ignore[arg-type]
    recover(store, "t-s", who="lead", why="false alarm")
    fresh = Guard(budget=Budget(model_turns=5, tool_executions=5), store=store, task_id="t-s")
    assert fresh.begin_turn() is None


# --- the ledger and the receiver disagree: both ways forward are recorded ------------------------------------------


def replayed_while_unknown(store: Store, sent: list[Any]) -> Any:
    """A committed write replayed while verify answers unknown: the task ends needs_reconciliation/unknown_commit
    while the ledger says committed."""
    answers = iter(
        [{"revision": 1, "done": False, "effect": "committed"}, {"revision": 1, "done": False, "effect": "unknown"}]
    )

    def execute(call: Any) -> Any:
        sent.append(call)
        return {"status": "ok", "receipt": "r-1"}

    run = create_runner(
        budget=Budget(model_turns=9, tool_executions=9),
        store=store,
        task_id="t-dis",
        execute=execute,
        verify=lambda c, r: next(answers),
    )
    outcome = run([PAY, PAY])
    assert (outcome.status, outcome.reason) == (Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT)
    assert store.lookup_operation("inv-7-pay").state is OperationState.COMMITTED  # type: ignore[union-attr]
    return outcome


def test_a_committed_operation_confirmed_by_the_receiver_reopens_the_task(store: Store) -> None:
    sent: list[Any] = []
    replayed_while_unknown(store, sent)
    with pytest.raises(RecoveryError, match="pass no result"):
        reconcile(store, "inv-7-pay", "committed", who="ops", result={"receipt": "other"})
    rec = reconcile(
        store, "inv-7-pay", "committed", who="ops", why="the bank shows r-1", result={"status": "ok", "receipt": "r-1"}
    )
    assert rec.reopened and rec.transition is not None and rec.transition.kind == "confirm"
    assert (rec.transition.who, rec.transition.why, rec.transition.operation_id) == (
        "ops",
        "the bank shows r-1",
        "inv-7-pay",
    )
    assert rec.transition.from_outcome["reason"] == "unknown_commit"  # type: ignore[index]
    assert rec.operation.result == {"status": "ok", "receipt": "r-1"}
    assert store.task("t-dis").status == "running"  # type: ignore[union-attr]
    outcome = continue_task(store, "t-dis", [PAY], sent)
    assert outcome.status is Status.COMPLETED and len(sent) == 1, "confirmed: returned from the ledger, not re-sent"


def test_a_committed_operation_the_receiver_never_got_is_corrected_only_explicitly(store: Store) -> None:
    sent: list[Any] = []
    replayed_while_unknown(store, sent)
    with pytest.raises(RecoveryRefused) as err:
        reconcile(store, "inv-7-pay", "not_committed", who="ops", why="the bank has no r-1")
    message = str(err.value)
    assert "already committed in the ledger, but the answer is not_committed" in message
    assert "disagree" in message and "correct=True" in message
    assert exit_code(err.value) == 1 and store.transitions("t-dis") == []
    rec = reconcile(store, "inv-7-pay", "not_committed", who="ops", why="the bank has no r-1", correct=True)
    assert rec.operation.state is OperationState.NOT_COMMITTED and rec.operation.result is None
    assert rec.recorded is not None and (rec.recorded.kind, rec.recorded.who, rec.recorded.why) == (
        "correct",
        "ops",
        "the bank has no r-1",
    )
    assert rec.reopened and [str(a) for a in rec.allowed_next_actions] == ["bounded_retry", "human_review"]
    outcome = continue_task(store, "t-dis", [PAY], sent)
    assert outcome.status is Status.COMPLETED and len(sent) == 2, "the corrected write was sent once more"
    assert store.lookup_operation("inv-7-pay").attempts == 2  # type: ignore[union-attr]


def test_recover_moves_a_task_needing_reconciliation_on_once_nothing_is_unknown(store: Store) -> None:
    replayed_while_unknown(store, [])
    transition = recover(store, "t-dis", who="lead", why="the ledger is right: committed")
    assert transition.kind == "recover" and transition.from_outcome["reason"] == "unknown_commit"  # type: ignore[index]
    assert store.task("t-dis").status == "running"  # type: ignore[union-attr]


def test_recover_still_refuses_while_the_named_operation_is_unknown(store: Store) -> None:
    lost_payment(store, task_id="t-owner")
    guard = Guard(budget=Budget(model_turns=9, tool_executions=9), store=store, task_id="t-other")
    verdict = guard.authorize(PAY)  # reserved (unknown) by t-owner
    outcome = guard.end(verdict)  # type: ignore[arg-type]
    assert outcome.reason is Reason.UNKNOWN_COMMIT and outcome.operation_id == "inv-7-pay"
    with pytest.raises(RecoveryRefused, match="'inv-7-pay' is still unknown"):
        recover(store, "t-other", who="lead", why="try")
    answer = reconcile(store, "inv-7-pay", "committed", who="ops")
    # the answer reopens every task that waited on the operation: nothing is left for a recovery to do
    assert answer.reopened_elsewhere == ("t-other",)
    assert store.task("t-other").status == "running"  # type: ignore[union-attr]
    with pytest.raises(RecoveryRefused, match="is running"):
        recover(store, "t-other", who="lead", why="answered")


def test_every_answer_about_an_operation_is_recorded_and_an_unknown_one_is_not(store: Store) -> None:
    guard = Guard(budget=Budget(model_turns=9, tool_executions=9), store=store, task_id="t-two")
    for op in ("op-a", "op-b"):
        ticket = guard.authorize({"tool": "save", "kind": "write", "operation_id": op, "args": {"op": op}})
        guard.fail(ticket, TimeoutError())  # type: ignore[arg-type]
    guard.finish(Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT)
    assert reconcile(store, "op-a", "unknown", who="ops").recorded is None
    first = reconcile(store, "op-a", "committed", who="ops", why="found it")
    assert not first.reopened and first.recorded is not None and first.recorded.operation_id == "op-a"
    second = reconcile(store, "op-b", "not_committed", who="ops", why="never arrived")
    assert second.reopened
    assert [(t.kind, t.operation_id) for t in store.transitions("t-two")] == [
        ("reconcile", "op-a"),
        ("reconcile", "op-b"),
    ]
