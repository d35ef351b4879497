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
from agents_loopguard.store import Store

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
    late = two.end(Verdict(Status.STOPPED, Reason.STOP_REQUESTED, "task already completed"))
    assert (late.status, late.reason, late.detail) == (done.status, done.reason, done.detail)
    assert store.task("t-race").outcome["status"] == "completed"  # type: ignore[union-attr]
