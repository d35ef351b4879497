"""One contract for every store: MemoryStore, SQLStore on a SQLite file, SQLStore on PostgreSQL.

Each test states the behaviour the engine relies on; the same assertions run on the three backends, and the engine
itself runs end to end on each of them with identical outcomes, traces and ledgers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from agents_loopguard import Budget, create_runner
from agents_loopguard.store import (
    Grant,
    MemoryStore,
    OperationState,
    PauseAlreadyResumed,
    Store,
    StoreError,
    TraceEntry,
)
from agents_loopguard.values.outcome import Reason, Usage
from tests.support.scenarios import REASONS, Observed, Scenario, ev, library_runner, observed, read, write
from tests.support.scenarios import scenarios as core_scenarios

pytestmark = pytest.mark.timeout(60)

BIG = Budget(model_turns=100, tool_executions=100)


def tool_entry(tool: str = "search", **kwargs: Any) -> TraceEntry:
    return TraceEntry(kind="tool", tool=tool, args={"q": tool}, result_class="ok", **kwargs)


# --- tasks and counters ------------------------------------------------------------------------------------------


def test_ensure_task_creates_once_and_keeps_the_first_budget(store: Store) -> None:
    first = store.ensure_task("t", Budget(model_turns=3, tool_executions=2, deadline=50.0, cost=1.5), revision=2, now=7)
    again = store.ensure_task("t", Budget(model_turns=9, tool_executions=9), revision=5, now=8)
    assert first == again
    assert again.budget == Budget(model_turns=3, tool_executions=2, deadline=50.0, cost=1.5)
    assert (again.revision, again.status, again.stop_reason, again.outcome) == (2, "running", None, None)
    assert again.used == Usage() and again.created_at == 7.0
    assert store.task("t") == again
    assert store.task("missing") is None
    assert [t.task_id for t in store.tasks()] == ["t"]


def test_unknown_task_is_an_error_that_says_what_to_do(store: Store) -> None:
    with pytest.raises(StoreError, match="ensure_task"):
        store.reserve_turn("nope")
    with pytest.raises(StoreError, match="ensure_task"):
        store.reserve_execution("nope", "fp", max_repeats=2)
    with pytest.raises(StoreError, match="ensure_task"):
        store.record_execution("nope", tool_entry(), revision=1)
    with pytest.raises(StoreError, match="ensure_task"):
        store.request_stop("nope")


def test_tasks_are_listed_oldest_first(store: Store) -> None:
    for i, name in enumerate(["c", "a", "b"]):
        store.ensure_task(name, BIG, now=float(i))
    assert [t.task_id for t in store.tasks()] == ["c", "a", "b"]


def test_model_turns_are_reserved_up_to_the_limit_and_traced(store: Store) -> None:
    """Rules: R1 (gate before execution), R2 (separate counters), R4 (trace)."""
    store.ensure_task("t", Budget(model_turns=2, tool_executions=5))
    grants = [store.reserve_turn("t", now=float(i)) for i in range(3)]
    assert [g.granted for g in grants] == [True, True, False]
    assert grants[2].reason is Reason.MODEL_BUDGET
    assert [g.used.models for g in grants] == [1, 2, 2]
    trace = store.trace("t")
    assert [(e.kind, e.result_class, e.models, e.at, e.seq) for e in trace] == [
        ("model", "reserved", 1, 0.0, 1),
        ("model", "reserved", 2, 1.0, 2),
    ]
    assert store.task("t").used == Usage(models=2)  # type: ignore[union-attr]


def test_stop_mark_refuses_every_reservation_and_keeps_its_first_reason(store: Store) -> None:
    """Rules: R3 (shared stop mark)."""
    store.ensure_task("t", BIG)
    assert store.reserve_execution("t", "a", max_repeats=2).granted
    snap = store.request_stop("t", "operator says stop", now=3)
    assert snap.stop_reason == "operator says stop" and snap.used.tools == 1 and snap.updated_at == 3.0
    again = store.request_stop("t", "second", now=4)
    assert again.stop_reason == "operator says stop" and again.updated_at == 3.0
    for grant in (
        store.reserve_turn("t"),
        store.reserve_execution("t", "b", max_repeats=2),
        store.reserve_cost("t", 0.1),
    ):
        assert (grant.granted, grant.reason, grant.detail) == (
            False,
            Reason.STOP_REQUESTED,
            "stop mark: operator says stop",
        )
    claim = store.reserve_write("t", "op-1", "fp", "save", max_repeats=2)
    assert claim.grant is not None and claim.grant.reason is Reason.STOP_REQUESTED and claim.claim is None
    assert store.lookup_operation("op-1") is None
    assert store.task("t").used == Usage(tools=1)  # type: ignore[union-attr]


def test_a_finished_task_refuses_reservations(store: Store) -> None:
    store.ensure_task("t", BIG)
    store.finish("t", {"status": "partial", "reason": "plan_exhausted"})
    grant = store.reserve_turn("t")
    assert (grant.granted, grant.reason, grant.detail) == (False, Reason.TASK_FINISHED, "task already partial")


def test_same_call_is_bounded_per_revision(store: Store) -> None:
    """Rules: R7 (repetition and stall)."""
    store.ensure_task("t", BIG)
    grants = [store.reserve_execution("t", "fp", max_repeats=2, now=1) for _ in range(3)]
    assert [g.granted for g in grants] == [True, True, False]
    assert grants[2].reason is Reason.SAME_CALL and grants[2].used.tools == 2
    assert store.reserve_execution("t", "other", max_repeats=2).granted
    store.record_execution("t", tool_entry(), revision=1)  # the revision advanced: the same call may run again
    assert store.reserve_execution("t", "fp", max_repeats=2).granted
    assert store.reserve_execution("t", "fp", max_repeats=0).reason is Reason.SAME_CALL
    assert store.task("t").used.tools == 4  # type: ignore[union-attr]


def test_refusals_come_in_order_stop_then_repetition_then_budget(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=2))
    assert store.reserve_execution("t", "fp", max_repeats=2).granted
    assert store.reserve_execution("t", "fp", max_repeats=2).granted
    assert store.reserve_execution("t", "fp", max_repeats=2).reason is Reason.SAME_CALL
    budget = store.reserve_execution("t", "new", max_repeats=2)
    assert (budget.granted, budget.reason, budget.used.tools) == (False, Reason.TOOL_BUDGET, 2)
    store.request_stop("t")
    assert store.reserve_execution("t", "fp", max_repeats=2).reason is Reason.STOP_REQUESTED


def test_polls_have_their_own_wait_budget(store: Store) -> None:
    """Rules: R8 (polling)."""
    store.ensure_task("t", BIG)
    assert store.reserve_execution("t", "job", max_repeats=10, now=0, max_wait=10, poll=True).granted
    assert store.reserve_execution("t", "job", max_repeats=10, now=9, max_wait=10, poll=True).granted
    late = store.reserve_execution("t", "job", max_repeats=10, now=10, max_wait=10, poll=True)
    assert (late.granted, late.reason, late.detail) == (False, Reason.WAIT_BUDGET, "waited past max_wait")
    store.ensure_task("u", BIG)
    polls = [store.reserve_execution("u", "job", max_repeats=2, now=i, poll=True) for i in range(3)]
    assert [p.granted for p in polls] == [True, True, False]
    assert polls[2].reason is Reason.WAIT_BUDGET
    # pending is not progress and waiting never resets a counter: every poll counted against the task budget
    assert store.task("t").used.tools == 2 and store.task("u").used.tools == 2  # type: ignore[union-attr]


def test_cost_is_reserved_against_the_budget_and_settled(store: Store) -> None:
    """Rules: R2 (separate counters)."""
    store.ensure_task("t", Budget(model_turns=1, tool_executions=1, cost=1.0))
    assert store.reserve_cost("t", 0.75).used.cost == 0.75
    refused = store.reserve_cost("t", 0.5)
    assert (refused.granted, refused.reason, refused.used.cost) == (False, Reason.COST_BUDGET, 0.75)
    assert store.settle_cost("t", 0.75, 0.25).cost == 0.25
    assert store.settle_cost("t", 1.0, 0.0).cost == 0.0  # never below zero
    store.ensure_task("free", BIG)
    assert store.reserve_cost("free", 1e9).granted


# --- refusals: one rule and one wording on every backend ----------------------------------------------------------


def _stopped(store: Store, reserve: Callable[[Store], Grant]) -> Grant:
    store.ensure_task("t", BIG)
    assert store.reserve_execution("t", "a", max_repeats=2).granted
    store.request_stop("t", "operator says stop")
    return reserve(store)


def _finished(store: Store, reserve: Callable[[Store], Grant]) -> Grant:
    store.ensure_task("t", BIG)
    store.finish("t", {"status": "partial", "reason": "plan_exhausted"})
    return reserve(store)


def _at_revision_3(store: Store, budget: Budget = BIG) -> None:
    store.ensure_task("t", budget)
    store.record_execution("t", tool_entry(), revision=3)


def _same_call(store: Store) -> Grant:
    _at_revision_3(store)
    for _ in range(2):
        assert store.reserve_execution("t", "fp", max_repeats=2).granted
    return store.reserve_execution("t", "fp", max_repeats=2)


def _same_call_before_the_tool_budget(store: Store) -> Grant:
    _at_revision_3(store, Budget(model_turns=9, tool_executions=2))
    for _ in range(2):
        assert store.reserve_execution("t", "fp", max_repeats=2).granted
    return store.reserve_execution("t", "fp", max_repeats=2)


def _no_repeat_allowed(store: Store) -> Grant:
    _at_revision_3(store)
    return store.reserve_execution("t", "fp", max_repeats=0)


def _polls(store: Store) -> Grant:
    _at_revision_3(store)
    for i in range(3):
        assert store.reserve_execution("t", "job", max_repeats=3, now=i, poll=True).granted
    return store.reserve_execution("t", "job", max_repeats=3, now=3, poll=True)


def _waited(store: Store) -> Grant:
    _at_revision_3(store)
    assert store.reserve_execution("t", "job", max_repeats=9, now=0, max_wait=5, poll=True).granted
    return store.reserve_execution("t", "job", max_repeats=9, now=5, max_wait=5, poll=True)


def _tool_budget(store: Store) -> Grant:
    _at_revision_3(store, Budget(model_turns=9, tool_executions=1))
    assert store.reserve_execution("t", "a", max_repeats=2).granted
    return store.reserve_execution("t", "b", max_repeats=2)


def _model_budget(store: Store) -> Grant:
    store.ensure_task("t", Budget(model_turns=1, tool_executions=0))
    assert store.reserve_turn("t").granted
    return store.reserve_turn("t")


def _cost_budget(store: Store) -> Grant:
    store.ensure_task("t", Budget(model_turns=1, tool_executions=1, cost=1.0))
    assert store.reserve_cost("t", 0.75).granted
    return store.reserve_cost("t", 0.5)


def _write(setup: Callable[[Store], None], max_repeats: int = 2, tool_executions: int = 9) -> Callable[[Store], Grant]:
    """A refused write: the grant of ``reserve_write`` after ``setup``; the operation is never claimed."""

    def reserve(store: Store) -> Grant:
        _at_revision_3(store, Budget(model_turns=9, tool_executions=tool_executions))
        setup(store)
        reservation = store.reserve_write("t", "op-new", "fp-w", "save", max_repeats=max_repeats)
        assert reservation.claim is None and reservation.grant is not None
        assert store.lookup_operation("op-new") is None
        return reservation.grant

    return reserve


def _run_twice(store: Store) -> None:
    for n in (1, 2):
        assert store.reserve_write("t", f"op-{n}", "fp-w", "save", max_repeats=2).grant is not None


def _turn(store: Store) -> Grant:
    return store.reserve_turn("t")


def _execution(store: Store) -> Grant:
    return store.reserve_execution("t", "b", max_repeats=2)


def _cost(store: Store) -> Grant:
    return store.reserve_cost("t", 0.1)


def _new_write(store: Store) -> Grant:
    reservation = store.reserve_write("t", "op-1", "fp", "save", max_repeats=2)
    assert reservation.grant is not None
    return reservation.grant


SAME_CALL_AT_3 = "the same call already ran 2 times at revision 3 (allowed: 2)"
REFUSALS: dict[str, tuple[Callable[[Store], Grant], Reason, str]] = {
    "stop mark / turn": (lambda s: _stopped(s, _turn), Reason.STOP_REQUESTED, "stop mark: operator says stop"),
    "stop mark / execution": (
        lambda s: _stopped(s, _execution),
        Reason.STOP_REQUESTED,
        "stop mark: operator says stop",
    ),
    "stop mark / cost": (lambda s: _stopped(s, _cost), Reason.STOP_REQUESTED, "stop mark: operator says stop"),
    "stop mark / write": (lambda s: _stopped(s, _new_write), Reason.STOP_REQUESTED, "stop mark: operator says stop"),
    "finished / turn": (lambda s: _finished(s, _turn), Reason.TASK_FINISHED, "task already partial"),
    "finished / execution": (lambda s: _finished(s, _execution), Reason.TASK_FINISHED, "task already partial"),
    "same_call": (_same_call, Reason.SAME_CALL, SAME_CALL_AT_3),
    "same_call before tool_budget": (_same_call_before_the_tool_budget, Reason.SAME_CALL, SAME_CALL_AT_3),
    "same_call, none allowed": (
        _no_repeat_allowed,
        Reason.SAME_CALL,
        "the same call already ran 0 times at revision 3 (allowed: 0)",
    ),
    "wait_budget / polls": (
        _polls,
        Reason.WAIT_BUDGET,
        "the job is still pending after 3 polls at revision 3 (allowed: 3)",
    ),
    "wait_budget / max_wait": (_waited, Reason.WAIT_BUDGET, "waited past max_wait"),
    "tool_budget": (_tool_budget, Reason.TOOL_BUDGET, "the task has no tool executions left (1 of 1 used)"),
    "model_budget": (_model_budget, Reason.MODEL_BUDGET, "the task has no model turns left (1 of 1 used)"),
    "cost_budget": (_cost_budget, Reason.COST_BUDGET, "reserving 0.5 would exceed the cost budget (1; used 0.75)"),
    "write / same_call": (_write(_run_twice), Reason.SAME_CALL, SAME_CALL_AT_3),
    "write / same_call, none allowed": (
        _write(lambda s: None, max_repeats=0),
        Reason.SAME_CALL,
        "the same call already ran 0 times at revision 3 (allowed: 0)",
    ),
    "write / tool_budget": (
        _write(_run_twice, max_repeats=3, tool_executions=2),
        Reason.TOOL_BUDGET,
        "the task has no tool executions left (2 of 2 used)",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refusal_has_the_same_reason_and_words_on_every_backend(store: Store, case: str) -> None:
    """The refusal rules are written once (store/rules.py): MemoryStore decides with them, SQLStore explains its
    refused statement with them, so reason, detail, counters and revision are the same everywhere."""
    reserve, reason, detail = REFUSALS[case]
    expected = reserve(MemoryStore())
    got = reserve(store)
    assert (got.granted, got.reason, got.detail) == (False, reason, detail)
    assert (got.used, got.revision) == (expected.used, expected.revision)
    assert (expected.granted, expected.reason, expected.detail) == (False, reason, detail)


# --- the ledger --------------------------------------------------------------------------------------------------


def test_an_operation_is_claimed_once_and_conflicts_are_returned_unclaimed(store: Store) -> None:
    """Rules: R10 (writes and the ledger)."""
    store.ensure_task("t", BIG)
    claim = store.reserve_operation("t", "op-1", "fp-a", "save", now=5)
    assert claim.claimed and claim.record.state is OperationState.UNKNOWN
    assert (claim.record.attempts, claim.record.created_at, claim.record.tool) == (1, 5.0, "save")
    again = store.reserve_operation("t", "op-1", "fp-a", "save", now=6)
    assert not again.claimed and again.record == claim.record
    other = store.reserve_operation("t", "op-1", "fp-b", "save", now=6)
    assert not other.claimed and other.record.payload == "fp-a"
    assert store.lookup_operation("op-1") == claim.record
    assert store.lookup_operation("op-2") is None


def test_a_verified_non_execution_may_be_claimed_again_with_the_same_payload(store: Store) -> None:
    store.ensure_task("t", BIG)
    store.reserve_operation("t", "op-1", "fp-a", "save")
    store.reconcile_operation("op-1", OperationState.NOT_COMMITTED, now=2)
    assert not store.reserve_operation("t", "op-1", "fp-b", "save").claimed
    retry = store.reserve_operation("t", "op-1", "fp-a", "save", now=3)
    assert retry.claimed
    assert (retry.record.state, retry.record.attempts, retry.record.result, retry.record.updated_at) == (
        OperationState.UNKNOWN,
        2,
        None,
        3.0,
    )


def test_reconcile_records_the_receivers_answer_for_an_unknown_operation_only(store: Store) -> None:
    """Rules: R10 (writes and the ledger)."""
    store.ensure_task("t", BIG)
    store.reserve_operation("t", "op-1", "fp", "pay")
    still = store.reconcile_operation("op-1", OperationState.UNKNOWN)
    assert still.state is OperationState.UNKNOWN
    done = store.reconcile_operation("op-1", OperationState.COMMITTED, {"status": "ok", "receipt": "r-1"}, now=9)
    assert (done.state, done.result, done.updated_at) == (
        OperationState.COMMITTED,
        {"status": "ok", "receipt": "r-1"},
        9,
    )
    assert store.lookup_operation("op-1") == done
    with pytest.raises(StoreError, match="not unknown"):
        store.reconcile_operation("op-1", OperationState.NOT_COMMITTED)
    with pytest.raises(StoreError, match="unknown operation"):
        store.reconcile_operation("op-404", OperationState.COMMITTED)


def test_reserve_write_decides_the_ledger_before_the_counters(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=3))
    first = store.reserve_write("t", "op-1", "fp", "save", max_repeats=2, now=1)
    assert first.grant is not None and first.grant.granted and first.grant.used.tools == 1
    assert first.claim is not None and first.claim.claimed and first.claim.record.state is OperationState.UNKNOWN
    # unknown, committed or another payload: returned unclaimed, and no counter moves
    unknown = store.reserve_write("t", "op-1", "fp", "save", max_repeats=2)
    assert unknown.grant is None and unknown.claim is not None and not unknown.claim.claimed
    assert unknown.claim.record.state is OperationState.UNKNOWN
    store.record_execution(
        "t", tool_entry("save"), revision=1, operation=("op-1", OperationState.COMMITTED, {"status": "ok", "n": 1})
    )
    replay = store.reserve_write("t", "op-1", "fp", "save", max_repeats=2)
    assert replay.grant is None and replay.claim is not None
    assert replay.claim.record.state is OperationState.COMMITTED and replay.claim.record.result == {
        "status": "ok",
        "n": 1,
    }
    conflict = store.reserve_write("t", "op-1", "fp-other", "save", max_repeats=2)
    assert conflict.grant is None and conflict.claim is not None and conflict.claim.record.payload == "fp"
    assert store.task("t").used.tools == 1  # type: ignore[union-attr]


def test_reserve_write_refused_by_the_budget_leaves_no_operation(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=1))
    assert store.reserve_execution("t", "read", max_repeats=2).granted
    refused = store.reserve_write("t", "op-1", "fp", "save", max_repeats=2)
    assert refused.grant is not None and refused.grant.reason is Reason.TOOL_BUDGET and refused.claim is None
    assert store.lookup_operation("op-1") is None


def test_reserve_write_retries_a_not_committed_operation_within_the_budget(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=2))
    store.reserve_write("t", "op-1", "fp", "save", max_repeats=5)
    store.record_execution("t", tool_entry("save"), revision=0, operation=("op-1", OperationState.NOT_COMMITTED, None))
    retry = store.reserve_write("t", "op-1", "fp", "save", max_repeats=5, now=4)
    assert retry.grant is not None and retry.grant.granted and retry.grant.used.tools == 2
    assert retry.claim is not None and retry.claim.claimed and retry.claim.record.attempts == 2
    store.record_execution("t", tool_entry("save"), revision=0, operation=("op-1", OperationState.NOT_COMMITTED, None))
    out_of_budget = store.reserve_write("t", "op-1", "fp", "save", max_repeats=5)
    assert out_of_budget.grant is not None and out_of_budget.grant.reason is Reason.TOOL_BUDGET
    assert store.lookup_operation("op-1").state is OperationState.NOT_COMMITTED  # type: ignore[union-attr]


def test_reserve_write_counts_the_repetition_of_its_payload(store: Store) -> None:
    store.ensure_task("t", BIG)
    store.reserve_write("t", "op-1", "fp", "save", max_repeats=1)
    store.reconcile_operation("op-1", OperationState.NOT_COMMITTED)
    again = store.reserve_write("t", "op-1", "fp", "save", max_repeats=1)
    assert again.grant is not None and again.grant.reason is Reason.SAME_CALL and again.claim is None
    assert store.lookup_operation("op-1").state is OperationState.NOT_COMMITTED  # type: ignore[union-attr]
    assert store.task("t").used.tools == 1  # type: ignore[union-attr]


def test_operations_are_listed_per_task(store: Store) -> None:
    store.ensure_task("a", BIG)
    store.ensure_task("b", BIG)
    store.reserve_operation("a", "op-1", "x", "save", now=1)
    store.reserve_operation("b", "op-2", "y", "save", now=2)
    store.reserve_operation("a", "op-3", "z", "save", now=3)
    assert [r.operation_id for r in store.operations("a")] == ["op-1", "op-3"]
    assert [r.operation_id for r in store.operations()] == ["op-1", "op-2", "op-3"]
    # the operations in flight of a stopped task can be listed
    store.reconcile_operation("op-1", OperationState.COMMITTED, {"status": "ok"})
    store.request_stop("a")
    assert [r.operation_id for r in store.operations("a") if r.state is OperationState.UNKNOWN] == ["op-3"]


# --- results and progress ----------------------------------------------------------------------------------------


def test_progress_keeps_the_highest_revision_and_counts_stalls(store: Store) -> None:
    """Rules: R6 (progress is decided by the application), R7 (repetition and stall)."""
    store.ensure_task("t", BIG, revision=1)
    steps = [
        ({"revision": 3}, (3, 0)),
        ({"revision": 2}, (3, 1)),  # never goes back; not advancing is a stall
        ({"revision": 3}, (3, 2)),
        ({"revision": 3, "pending": True}, (3, 2)),  # a pending poll is neither progress nor a stall
        ({"revision": None}, (3, 2)),  # no progress recorded at all
        ({"revision": 4, "pending": True}, (4, 0)),  # advancing resets, pending or not
    ]
    for kwargs, expected in steps:
        progress = store.record_execution("t", tool_entry(), **kwargs)
        assert (progress.revision, progress.stalled) == expected, kwargs
    snap = store.task("t")
    assert snap is not None and (snap.revision, snap.stalled) == (4, 0)


def test_record_execution_settles_the_write_in_the_same_step(store: Store) -> None:
    store.ensure_task("t", BIG)
    store.reserve_write("t", "op-1", "fp", "save", max_repeats=2)
    entry = TraceEntry(
        kind="tool",
        tool="save",
        args={"amount": 5, "note": "ünïcode ✓"},
        result_class="ok",
        revision=0,
        models=0,
        tools=1,
        fingerprint="fp",
        operation_id="op-1",
        operation_state="committed",
        at=12.5,
    )
    progress = store.record_execution(
        "t", entry, revision=1, operation=("op-1", OperationState.COMMITTED, {"status": "ok", "id": [1, 2.5, None]})
    )
    assert (progress.revision, progress.stalled, progress.used.tools) == (1, 0, 1)
    record = store.lookup_operation("op-1")
    assert record is not None and record.state is OperationState.COMMITTED
    assert record.result == {"status": "ok", "id": [1, 2.5, None]} and record.updated_at == 12.5
    assert store.trace("t") == [replace(entry, seq=1)]


def test_seen_keys_are_reported_as_seen_before_or_not(store: Store) -> None:
    """Rules: R9 (pagination)."""
    store.ensure_task("t", BIG)
    first = store.record_execution("t", tool_entry(), revision=1, seen=["cursor:a", "record:1", "record:1"])
    assert first.seen_before == (False, False, False)
    second = store.record_execution("t", tool_entry(), revision=2, seen=["cursor:b", "record:1"])
    assert second.seen_before == (False, True)
    store.ensure_task("other", BIG)
    assert store.record_execution("other", tool_entry(), revision=1, seen=["record:1"]).seen_before == (False,)


def test_trace_keeps_every_step_in_order(store: Store) -> None:
    """Rules: R4 (trace)."""
    store.ensure_task("t", BIG)
    store.reserve_turn("t", now=1)
    store.append_trace("t", tool_entry("refused", at=2))
    store.record_execution("t", tool_entry("ran", at=3), revision=None)
    store.reserve_turn("t", now=4)
    trace = store.trace("t")
    assert [(e.seq, e.kind, e.tool, e.at) for e in trace] == [
        (1, "model", None, 1.0),
        (2, "tool", "refused", 2.0),
        (3, "tool", "ran", 3.0),
        (4, "model", None, 4.0),
    ]
    assert trace[1].args == {"q": "refused"}
    with pytest.raises(StoreError):
        store.trace("missing")


# --- terminal outcome ----------------------------------------------------------------------------------------------


def test_finish_stores_the_first_outcome_only(store: Store) -> None:
    store.ensure_task("t", BIG)
    first = {"status": "stopped", "reason": "same_call", "used": {"models": 1, "tools": 2}}
    assert store.finish("t", first, now=5) == first
    assert store.finish("t", {"status": "completed", "reason": "validated_done"}, now=6) == first
    snap = store.task("t")
    assert snap is not None and (snap.status, snap.outcome, snap.updated_at) == ("stopped", first, 5.0)


# --- workflow re-entry -----------------------------------------------------------------------------------------------


def test_activations_follow_the_chain_through_the_ledger(store: Store) -> None:
    """Rules: R15 (re-entry across executions)."""
    outside = store.activate("sync", "a-0", origin_operation_id=None, max_depth=1)
    assert (outside.granted, outside.chain_id, outside.depth, outside.duplicate) == (True, "a-0", 0, False)
    store.ensure_task("a-0", BIG)  # the activation id is also the task id of the run it starts
    store.reserve_operation("a-0", "write-by-a0", "fp", "save")
    child = store.activate("sync", "a-1", origin_operation_id="write-by-a0", max_depth=1)
    assert (child.granted, child.chain_id, child.depth) == (True, "a-0", 1)
    store.ensure_task("a-1", BIG)
    store.reserve_operation("a-1", "write-by-a1", "fp", "save")
    refused = store.activate("sync", "a-2", origin_operation_id="write-by-a1", max_depth=1)
    assert (refused.granted, refused.reason, refused.depth) == (False, Reason.TRIGGER_CHAIN, 2)
    duplicate = store.activate("sync", "a-1", origin_operation_id=None, max_depth=5)
    assert duplicate.duplicate and (duplicate.depth, duplicate.chain_id) == (1, "a-0")
    other_flow = store.activate("billing", "b-0", origin_operation_id="write-by-a1", max_depth=0)
    assert (other_flow.granted, other_flow.depth, other_flow.chain_id) == (True, 0, "a-0"), "joins, not re-enters"
    assert [a.activation_id for a in store.activations()] == ["a-0", "a-1", "a-2", "b-0"]
    assert [a.activation_id for a in store.activations("billing")] == ["b-0"]
    assert not any(a.duplicate for a in store.activations())


def test_a_flow_re_triggered_through_another_flow_is_a_re_entry(store: Store) -> None:
    """A -> B -> A: each activation alone is fine, the chain feeds itself; the store sees A among the ancestors.

    Rules: R15 (re-entry across executions).
    """
    a0 = store.activate("orders", "o-0", origin_operation_id=None, max_depth=0)
    store.ensure_task("o-0", BIG)
    store.reserve_operation("o-0", "row-by-o0", "fp", "save")
    b0 = store.activate("billing", "b-0", origin_operation_id="row-by-o0", max_depth=0)
    assert (a0.granted, b0.granted, b0.depth, b0.chain_id) == (True, True, 0, "o-0")
    store.ensure_task("b-0", BIG)
    store.reserve_operation("b-0", "invoice-by-b0", "fp", "save")
    echo = store.activate("orders", "o-1", origin_operation_id="invoice-by-b0", max_depth=0)
    assert (echo.granted, echo.reason, echo.depth, echo.chain_id) == (False, Reason.TRIGGER_CHAIN, 1, "o-0")
    allowed = store.activate("orders", "o-2", origin_operation_id="invoice-by-b0", max_depth=1)
    assert (allowed.granted, allowed.depth) == (True, 1), "a chain budget of one re-entry admits it"


# --- approval pauses and transitions ---------------------------------------------------------------------------------

HUMAN = {"status": "needs_human", "reason": "approval", "pause_id": "p-1"}
CALLS = [{"call_id": "c1", "tool": "pay", "arguments": '{"amount":5}', "operation_id": "inv-1"}]


def paused(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=5, tool_executions=5, deadline=99.0))
    store.reserve_turn("t")
    store.reserve_execution("t", "fp", max_repeats=2)
    store.save_pause("t", "p-1", '{"run": "state"}', CALLS, digest="d1", outcome=HUMAN, now=10)


def test_a_pause_is_stored_with_the_budget_and_finishes_the_task(store: Store) -> None:
    paused(store)
    pause = store.pause("p-1")
    assert pause is not None
    assert (pause.status, pause.state, pause.digest, pause.pending_calls) == (
        "pending",
        '{"run": "state"}',
        "d1",
        tuple(CALLS),
    )
    assert pause.budget == Budget(model_turns=5, tool_executions=5, deadline=99.0)
    assert pause.used == Usage(models=1, tools=1) and pause.created_at == 10.0
    snap = store.task("t")
    assert snap is not None and (snap.status, snap.outcome) == ("needs_human", HUMAN)
    with pytest.raises(StoreError, match="already exists"):
        store.save_pause("t", "p-1", "{}", [], digest="d", outcome=HUMAN)
    with pytest.raises(StoreError):
        store.save_pause("missing", "p-2", "{}", [], digest="d", outcome=HUMAN)
    assert [p.pause_id for p in store.pauses("t")] == ["p-1"] and store.pauses("other") == []


def test_a_pause_resumes_once_and_reopens_the_task_without_touching_counters(store: Store) -> None:
    """Rules: R13 (approval pauses)."""
    paused(store)
    claimed, transition = store.claim_pause("p-1", who="ops", decisions={"c1": "approve"}, why="ok", now=11)
    assert (claimed.status, claimed.resumed_by, claimed.resumed_at, claimed.decisions) == (
        "resumed",
        "ops",
        11.0,
        {"c1": "approve"},
    )
    assert (transition.kind, transition.who, transition.why, transition.pause_id) == ("resume", "ops", "ok", "p-1")
    assert transition.from_outcome == HUMAN and transition.decisions == {"c1": "approve"}
    snap = store.task("t")
    assert snap is not None and (snap.status, snap.outcome, snap.used) == ("running", None, Usage(models=1, tools=1))
    with pytest.raises(PauseAlreadyResumed, match="at most once"):
        store.claim_pause("p-1", who="someone else", decisions={"c1": "approve"})
    with pytest.raises(PauseAlreadyResumed):
        store.decide_pause("p-1", who="late", decisions={"c1": "reject"})
    with pytest.raises(StoreError, match="unknown pause"):
        store.claim_pause("p-404", who="x", decisions={})
    assert [t.transition_id for t in store.transitions("t")] == [transition.transition_id]


def test_decisions_recorded_by_an_operator_are_applied_by_the_resuming_process(store: Store) -> None:
    paused(store)
    with pytest.raises(StoreError, match="no recorded decisions"):
        store.claim_pause("p-1", who="worker")
    decided = store.decide_pause("p-1", who="lead", decisions={"c1": "reject"})
    assert (decided.status, decided.decided_by, decided.decisions) == ("decided", "lead", {"c1": "reject"})
    with pytest.raises(PauseAlreadyResumed, match="final"):
        store.decide_pause("p-1", who="other", decisions={"c1": "approve"})
    claimed, transition = store.claim_pause("p-1", who="worker", now=12)
    assert claimed.decisions == {"c1": "reject"} and claimed.decided_by == "lead"
    assert transition.decisions == {"c1": "reject"}


def test_recover_extends_limits_by_a_recorded_decision_and_never_resets_counters(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=1, tool_executions=1, cost=1.0))
    store.reserve_turn("t")
    store.reserve_execution("t", "fp", max_repeats=2)
    with pytest.raises(StoreError, match="running"):
        store.recover("t", who="lead", why="nothing ended")
    store.request_stop("t", "operator")
    finished = {"status": "stopped", "reason": "stop_requested"}
    store.finish("t", finished)
    transition = store.recover(
        "t", who="lead", why="two more turns", budget_delta={"model_turns": 2, "cost": 0.5, "deadline": 50.0}, now=20
    )
    assert (transition.kind, transition.from_outcome, transition.budget_delta["model_turns"]) == (
        "recover",
        finished,
        2,
    )
    snap = store.task("t")
    assert snap is not None
    assert snap.budget == Budget(model_turns=3, tool_executions=1, deadline=50.0, cost=1.5)
    assert (snap.used, snap.status, snap.stop_reason, snap.outcome) == (Usage(1, 1), "running", None, None)
    assert store.reserve_turn("t").granted


def test_a_reconcile_transition_keeps_the_stop_mark(store: Store) -> None:
    store.ensure_task("t", BIG)
    store.request_stop("t", "operator")
    store.finish("t", {"status": "needs_reconciliation", "reason": "unknown_commit"})
    store.recover("t", who="ops", why="reconciled", kind="reconcile")
    snap = store.task("t")
    assert snap is not None and (snap.status, snap.stop_reason) == ("running", "operator")
    assert store.reserve_turn("t").reason is Reason.STOP_REQUESTED
    # a running task that carries a stop mark can be recovered explicitly
    store.recover("t", who="ops", why="resume work")
    assert store.reserve_turn("t").granted
    assert [t.kind for t in store.transitions()] == ["reconcile", "recover"]


def test_a_second_store_on_the_same_database_sees_the_same_state(store_factory: Callable[[], Store]) -> None:
    """Rules: R16 (many workers)."""
    one, two = store_factory(), store_factory()
    one.ensure_task("t", BIG)
    one.reserve_operation("t", "op-1", "fp", "save")
    two.request_stop("t", "from another worker")
    assert one.reserve_turn("t").detail == "stop mark: from another worker"
    assert not two.reserve_operation("t", "op-1", "fp", "save").claimed


# --- the engine end to end on each backend ---------------------------------------------------------------------------


def run_on(store: Store, sc: Scenario, task_id: str, rounds: int = 1) -> tuple[Observed, list[TraceEntry], Any]:
    """Run a core scenario with ``store`` as the ledger; what it returned, its trace and its task."""
    run, executed = library_runner(sc, store, task_id)
    for _ in range(rounds):
        out = run(sc.proposals)
    snap = store.task(task_id)
    assert snap is not None
    return observed(out, store, executed, task_id), store.trace(task_id), snap


def isolated(sc: Scenario, tag: str) -> Scenario:
    """The scenario with its operation ids made unique, so many runs can share one database."""

    def fix(p: Any) -> Any:
        if isinstance(p, dict) and isinstance(p.get("operation_id"), str) and p["operation_id"]:
            return {**p, "operation_id": f"{tag}:{p['operation_id']}"}
        return p

    return replace(sc, proposals=[fix(p) for p in sc.proposals])


def assert_same_as_memory(store: Store, sc: Scenario, rounds: int = 1) -> Observed:
    tag = uuid.uuid4().hex[:8]
    sc = isolated(sc, tag)
    expected, expected_trace, expected_task = run_on(MemoryStore(), sc, f"task-{tag}", rounds)
    got, trace, task = run_on(store, sc, f"task-{tag}", rounds)
    assert got == expected
    assert trace == expected_trace
    assert task == expected_task
    return got


@pytest.mark.parametrize("reason", sorted(REASONS))
def test_engine_reaches_the_same_outcome_on_every_backend(store: Store, reason: str) -> None:
    assert assert_same_as_memory(store, REASONS[reason]).reason == reason


@pytest.mark.parametrize(
    "sc",
    [
        Scenario(
            [write(), write(), read("z")], evidence=[ev(1, False, "committed"), ev(1, False, "committed"), ev(2, True)]
        ),
        Scenario([write(), write()], evidence=[ev(0, False, "not_committed"), ev(1, True, "committed")]),
        Scenario([write(5), write(6)], evidence=[ev(1, effect="committed")]),
        Scenario(
            [write()], results=[{"status": "ok", "api_key": "sk-abcdefghijklmnop"}], evidence=[ev(1, True, "committed")]
        ),
    ],
    ids=["replay", "retry-not-committed", "conflict", "redacted-result"],
)
def test_engine_ledger_paths_match_memory(store: Store, sc: Scenario) -> None:
    assert_same_as_memory(store, sc, rounds=2)


def test_a_committed_write_is_not_executed_again_by_a_later_run(store_factory: Callable[[], Store]) -> None:
    calls: list[Any] = []

    def run_once(store: Store) -> Any:
        return create_runner(
            budget=Budget(model_turns=5, tool_executions=5),
            store=store,
            now=lambda: 0,
            execute=lambda c: calls.append(c) or {"status": "ok", "id": 7},
            verify=lambda c, r: ev(1, False, "committed"),
        )([write()])

    run_once(store_factory())
    second = run_once(store_factory())  # another store on the same database: another worker
    assert len(calls) == 1 and second.value == {"status": "ok", "id": 7}


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(sc=core_scenarios)
def test_engine_differential_on_every_backend(store: Store, sc: Scenario) -> None:
    assert_same_as_memory(store, sc)
