"""The store contract of token limits and per-tool limits, on MemoryStore, SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget
from agents_loopguard.store import Grant, MemoryStore, OperationState, Store, TraceEntry
from agents_loopguard.values.errors import InputError
from agents_loopguard.values.outcome import Reason, Usage

pytestmark = pytest.mark.timeout(60)

TOKENS = Budget(model_turns=9, tool_executions=9, input_tokens=1000, output_tokens=500, total_tokens=1200)


# --- tokens --------------------------------------------------------------------------------------------------------


def test_token_limits_are_stored_with_the_task_and_its_pauses(store: Store) -> None:
    first = store.ensure_task("t", TOKENS)
    assert first.budget == TOKENS and first.used == Usage()
    assert store.task("t").budget == TOKENS  # type: ignore[union-attr]
    assert store.reserve_tokens("t", 100, 50).granted
    store.save_pause("t", "p-1", "{}", [], digest="d", outcome={"status": "needs_human"})
    pause = store.pause("p-1")
    assert pause is not None and pause.budget == TOKENS and pause.used == Usage(input_tokens=100, output_tokens=50)


def test_tokens_are_reserved_within_every_limit_and_settled_with_the_reported_usage(store: Store) -> None:
    store.ensure_task("t", TOKENS)
    grant = store.reserve_tokens("t", 600, 400)
    assert grant.granted and grant.used == Usage(input_tokens=600, output_tokens=400)
    assert store.settle_tokens("t", reserved=(600, 400), actual=(550, 120)) == Usage(
        input_tokens=550, output_tokens=120
    )
    assert store.reserve_tokens("t", 450, 0).granted  # input 1000 of 1000
    refused = store.reserve_tokens("t", 1, 0)
    assert (refused.granted, refused.reason) == (False, Reason.TOKEN_BUDGET)
    assert store.task("t").used == Usage(input_tokens=1000, output_tokens=120)  # type: ignore[union-attr]
    assert store.settle_tokens("t", reserved=(5000, 5000), actual=(0, 0)) == Usage()  # never below zero


def test_a_task_without_token_limits_takes_any_amount_and_counts_it(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=1, tool_executions=1))
    assert store.reserve_tokens("t", 10**12, 10**12).used == Usage(input_tokens=10**12, output_tokens=10**12)


def test_token_amounts_must_be_non_negative_ints(store: Store) -> None:
    store.ensure_task("t", TOKENS)
    for bad in ((-1, 0), (0, -5), (1.5, 0), (True, 0)):
        with pytest.raises(InputError, match="non-negative ints"):
            store.reserve_tokens("t", *bad)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        store.settle_tokens("t", reserved=(1, 1), actual=(-1, 0))
    assert store.task("t").used == Usage()  # type: ignore[union-attr]


def test_token_limits_grow_only_by_a_recorded_extension(store: Store) -> None:
    store.ensure_task("t", TOKENS)
    store.reserve_tokens("t", 1000, 0)
    store.finish("t", {"status": "stopped", "reason": "token_budget"})
    transition = store.recover("t", who="lead", why="long document", budget_delta={"input_tokens": 500})
    assert transition.budget_delta == {"input_tokens": 500}
    task = store.task("t")
    assert task is not None and task.budget.input_tokens == 1500 and task.budget.total_tokens == 1200
    assert task.used.input_tokens == 1000  # counters never reset
    assert store.reserve_tokens("t", 150, 0).granted and not store.reserve_tokens("t", 100, 0).granted


# --- per-tool limits -------------------------------------------------------------------------------------------------


def test_a_tool_limit_counts_that_tools_executions_across_calls_and_revisions(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    limit = ("send_email", 2)
    assert store.reserve_execution("t", "a", max_repeats=2, tool_limit=limit).granted
    store.record_execution("t", TraceEntry(kind="tool", tool="send_email"), revision=1)
    assert store.reserve_execution("t", "b", max_repeats=2, tool_limit=limit).granted
    third = store.reserve_execution("t", "c", max_repeats=2, tool_limit=limit)
    assert (third.granted, third.reason, third.used.tools) == (False, Reason.TOOL_LIMIT, 2)
    assert third.detail == "the tool 'send_email' already ran 2 times in this task (allowed: 2)"
    assert store.reserve_execution("t", "d", max_repeats=2, tool_limit=("search", 2)).granted  # other tools run
    assert store.reserve_execution("t", "e", max_repeats=2).granted  # a reservation without a limit is not counted
    assert store.task("t").used.tools == 4  # type: ignore[union-attr]


def test_a_write_with_a_tool_limit_claims_nothing_when_refused(store: Store) -> None:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    first = store.reserve_write("t", "op-1", "fp-1", "pay", max_repeats=2, tool_limit=("pay", 1))
    assert first.grant is not None and first.grant.granted and first.claim is not None and first.claim.claimed
    store.record_execution("t", TraceEntry(kind="tool"), revision=1, operation=("op-1", OperationState.COMMITTED, {}))
    second = store.reserve_write("t", "op-2", "fp-2", "pay", max_repeats=2, tool_limit=("pay", 1))
    assert second.claim is None and second.grant is not None and second.grant.reason is Reason.TOOL_LIMIT
    assert store.lookup_operation("op-2") is None
    replay = store.reserve_write("t", "op-1", "fp-1", "pay", max_repeats=2, tool_limit=("pay", 1))
    assert replay.grant is None and replay.claim is not None and not replay.claim.claimed  # the ledger answers first
    assert store.task("t").used.tools == 1  # type: ignore[union-attr]


def _tool_limit_reached(store: Store) -> Grant:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    store.record_execution("t", TraceEntry(kind="tool"), revision=3)
    for fp in ("a", "b"):
        assert store.reserve_execution("t", fp, max_repeats=2, tool_limit=("mail", 2)).granted
    return store.reserve_execution("t", "c", max_repeats=2, tool_limit=("mail", 2))


def _repetition_before_tool_limit(store: Store) -> Grant:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    for _ in range(2):
        assert store.reserve_execution("t", "same", max_repeats=2, tool_limit=("mail", 2)).granted
    return store.reserve_execution("t", "same", max_repeats=2, tool_limit=("mail", 2))


def _tool_limit_before_tool_budget(store: Store) -> Grant:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=1))
    assert store.reserve_execution("t", "a", max_repeats=2, tool_limit=("mail", 1)).granted
    return store.reserve_execution("t", "b", max_repeats=2, tool_limit=("mail", 1))


def _no_run_allowed(store: Store) -> Grant:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    return store.reserve_execution("t", "a", max_repeats=2, tool_limit=("mail", 0))


def _write_tool_limit(store: Store) -> Grant:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    assert store.reserve_write("t", "op-1", "fp-1", "pay", max_repeats=2, tool_limit=("pay", 1)).grant is not None
    reservation = store.reserve_write("t", "op-2", "fp-2", "pay", max_repeats=2, tool_limit=("pay", 1))
    assert reservation.grant is not None and reservation.claim is None
    return reservation.grant


def _poll_tool_limit(store: Store) -> Grant:
    store.ensure_task("t", Budget(model_turns=9, tool_executions=9))
    assert store.reserve_execution("t", "job", max_repeats=5, poll=True, max_wait=60, tool_limit=("status", 1)).granted
    return store.reserve_execution("t", "job", max_repeats=5, now=1, poll=True, max_wait=60, tool_limit=("status", 1))


def _input_tokens(store: Store) -> Grant:
    store.ensure_task("t", TOKENS)
    assert store.reserve_tokens("t", 900, 0).granted
    return store.reserve_tokens("t", 101, 0)


def _output_tokens(store: Store) -> Grant:
    store.ensure_task("t", TOKENS)
    return store.reserve_tokens("t", 0, 501)


def _total_tokens(store: Store) -> Grant:
    store.ensure_task("t", TOKENS)
    assert store.reserve_tokens("t", 700, 400).granted
    return store.reserve_tokens("t", 50, 51)


def _tokens_when_stopped(store: Store) -> Grant:
    store.ensure_task("t", TOKENS)
    store.request_stop("t", "operator")
    return store.reserve_tokens("t", 1, 1)


LIMITS: dict[str, tuple[Callable[[Store], Grant], Reason, str]] = {
    "tool_limit": (
        _tool_limit_reached,
        Reason.TOOL_LIMIT,
        "the tool 'mail' already ran 2 times in this task (allowed: 2)",
    ),
    "same_call before tool_limit": (
        _repetition_before_tool_limit,
        Reason.SAME_CALL,
        "the same call already ran 2 times at revision 0 (allowed: 2)",
    ),
    "tool_limit before tool_budget": (
        _tool_limit_before_tool_budget,
        Reason.TOOL_LIMIT,
        "the tool 'mail' already ran 1 times in this task (allowed: 1)",
    ),
    "tool_limit of 0": (
        _no_run_allowed,
        Reason.TOOL_LIMIT,
        "the tool 'mail' already ran 0 times in this task (allowed: 0)",
    ),
    "write / tool_limit": (
        _write_tool_limit,
        Reason.TOOL_LIMIT,
        "the tool 'pay' already ran 1 times in this task (allowed: 1)",
    ),
    "poll / tool_limit": (
        _poll_tool_limit,
        Reason.TOOL_LIMIT,
        "the tool 'status' already ran 1 times in this task (allowed: 1)",
    ),
    "input tokens": (
        _input_tokens,
        Reason.TOKEN_BUDGET,
        "reserving 101 input tokens would exceed the input token budget (1000; used 900)",
    ),
    "output tokens": (
        _output_tokens,
        Reason.TOKEN_BUDGET,
        "reserving 501 output tokens would exceed the output token budget (500; used 0)",
    ),
    "total tokens": (
        _total_tokens,
        Reason.TOKEN_BUDGET,
        "reserving 101 tokens would exceed the total token budget (1200; used 1100)",
    ),
    "tokens / stop mark": (_tokens_when_stopped, Reason.STOP_REQUESTED, "stop mark: operator"),
}


@pytest.mark.parametrize("case", sorted(LIMITS))
def test_each_limit_refusal_has_the_same_reason_and_words_on_every_backend(store: Store, case: str) -> None:
    reserve, reason, detail = LIMITS[case]
    expected = reserve(MemoryStore())
    got = reserve(store)
    assert (got.granted, got.reason, got.detail) == (False, reason, detail)
    assert (got.used, got.revision) == (expected.used, expected.revision)
    assert (expected.granted, expected.reason, expected.detail) == (False, reason, detail)


amounts = st.lists(
    st.tuples(st.sampled_from(["reserve", "settle"]), st.integers(0, 700), st.integers(0, 700)), max_size=12
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(steps=amounts)
def test_token_reservations_behave_as_in_memory(store_factory: Callable[[], Store], steps: list) -> None:
    """Any sequence of reservations and settlements: the same grants and counters as MemoryStore's."""
    import uuid

    store, memory = store_factory(), MemoryStore()
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    for s in (store, memory):
        s.ensure_task(task_id, TOKENS)
    last = (0, 0)
    for kind, a, b in steps:
        if kind == "reserve":
            got, want = store.reserve_tokens(task_id, a, b), memory.reserve_tokens(task_id, a, b)
            assert (got.granted, got.reason, got.detail, got.used) == (
                want.granted,
                want.reason,
                want.detail,
                want.used,
            )
            last = (a, b) if got.granted else last
        else:
            assert store.settle_tokens(task_id, reserved=last, actual=(a, b)) == memory.settle_tokens(
                task_id, reserved=last, actual=(a, b)
            )
    assert store.task(task_id).used == memory.task(task_id).used  # type: ignore[union-attr]


# --- a budget asked for a task that exists with another one ------------------------------------------------------


def test_ensure_task_reports_a_budget_that_differs_from_the_stored_one_and_keeps_the_stored_one(store: Store) -> None:
    first = store.ensure_task("t", TOKENS)
    assert first.created and first.requested is None and first.budget_changes() == {}
    same = store.ensure_task("t", TOKENS)
    assert not same.created and same.requested is None and same.budget_changes() == {}
    other = Budget(model_turns=50, tool_executions=9, input_tokens=1000, output_tokens=500)
    again = store.ensure_task("t", other)
    assert not again.created and again.budget == TOKENS and again.requested == other
    assert again.budget_changes() == {"model_turns": (9, 50), "total_tokens": (1200, None)}
    assert again == first  # the task itself is unchanged (created and requested describe the call)
    stored = store.task("t")
    assert stored is not None and stored.budget == TOKENS and stored.requested is None
