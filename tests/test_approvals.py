"""Pause digests and decision rules, independent of the Agents SDK."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agents_loopguard import Budget, Guard, MemoryStore
from agents_loopguard.ops.approvals import (
    DecisionError,
    PauseTampered,
    check_decisions,
    check_pause,
    decide,
    pause_digest,
)
from agents_loopguard.store.base import PauseAlreadyResumed

CALLS = [
    {"call_id": "c1", "tool": "pay", "arguments": '{"amount":5}', "operation_id": "inv-1"},
    {"call_id": "c2", "tool": "refund", "arguments": '{"amount":2}', "operation_id": "inv-2"},
]


def paused(store: MemoryStore, task_id: str = "t1", pause_id: str = "p1") -> None:
    guard = Guard(budget=Budget(model_turns=6, tool_executions=4), store=store, task_id=task_id)
    guard.begin_turn()
    store.save_pause(
        task_id,
        pause_id,
        '{"state": 1}',
        CALLS,
        digest=pause_digest(task_id, '{"state": 1}', CALLS),
        outcome={"status": "needs_human", "reason": "approval"},
    )


def test_pause_is_stored_with_the_counters_of_that_moment() -> None:
    store = MemoryStore()
    paused(store)
    record = store.pause("p1")
    assert record is not None and record.used.models == 1 and record.budget.model_turns == 6
    assert store.task("t1").status == "needs_human"
    assert check_pause(record) is record


@pytest.mark.parametrize(
    "change",
    [
        {"state": '{"state": 2}'},
        {"pending_calls": (dict(CALLS[0], arguments='{"amount":500}'), CALLS[1])},
        {"task_id": "t-other"},
    ],
)
def test_a_pause_whose_content_changed_is_refused(change: dict) -> None:
    store = MemoryStore()
    paused(store)
    tampered = replace(store.pause("p1"), **change)
    with pytest.raises(PauseTampered, match="does not match its digest"):
        check_pause(tampered)


def test_decisions_must_name_exactly_the_pauses_own_calls() -> None:
    store = MemoryStore()
    paused(store)
    record = store.pause("p1")
    assert check_decisions(record, {"c2": "reject", "c1": "approve"}) == {"c1": "approve", "c2": "reject"}
    with pytest.raises(DecisionError, match="no pending call 'c3'"):
        check_decisions(record, {"c1": "approve", "c2": "approve", "c3": "approve"})
    with pytest.raises(DecisionError, match="undecided calls: c2"):
        check_decisions(record, {"c1": "approve"})
    with pytest.raises(DecisionError, match="neither"):
        check_decisions(record, {"c1": "yes", "c2": "approve"})


def test_decide_records_once_and_a_second_decision_is_refused() -> None:
    store = MemoryStore()
    paused(store)
    first = decide(store, "p1", who="ana", approve=["c1"], reject=["c2"], why="c2 is a duplicate")
    assert first.status == "decided" and first.decisions == {"c1": "approve", "c2": "reject"}
    with pytest.raises(PauseAlreadyResumed, match="decisions are final"):
        decide(store, "p1", who="bob", approve_all=True)
    claimed, transition = store.claim_pause("p1", who="worker-1")
    assert claimed.decisions == first.decisions and transition.decisions == first.decisions
    assert (
        transition.pause_id == "p1" and transition.kind == "resume" and transition.from_outcome["reason"] == "approval"
    )
    assert store.task("t1").status == "running" and store.task("t1").used.models == 1
    with pytest.raises(PauseAlreadyResumed, match="at most once"):
        store.claim_pause("p1", who="worker-2", decisions={"c1": "approve", "c2": "approve"})


def test_decide_refuses_other_pauses_calls_and_unknown_pauses() -> None:
    store = MemoryStore()
    paused(store, "t1", "p1")
    with pytest.raises(DecisionError, match="unknown pause"):
        decide(store, "p-none", who="ana", approve_all=True)
    with pytest.raises(DecisionError, match="no pending call"):
        decide(store, "p1", who="ana", approve=["c1", "c2", "call-of-another-pause"])
    with pytest.raises(DecisionError, match="who"):
        decide(store, "p1", who="", approve_all=True)
    assert store.pause("p1").status == "pending", "a refused decision writes nothing"


def test_claim_without_decisions_needs_recorded_ones() -> None:
    store = MemoryStore()
    paused(store)
    from agents_loopguard.store.base import StoreError

    with pytest.raises(StoreError, match="no recorded decisions"):
        store.claim_pause("p1", who="worker")
    assert store.pause("p1").status == "pending"
