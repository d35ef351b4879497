"""MemoryStore stays bounded per task: a long-lived process keeps the last ``trace_limit`` trace entries of a task and
the repetition counts of its current revision only, and no decision changes for it."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget, Guard
from agents_loopguard.store import MemoryStore, TraceEntry
from agents_loopguard.store.memory import DEFAULT_TRACE_LIMIT
from agents_loopguard.values.calls import Ticket

pytestmark = pytest.mark.timeout(120)

BIG = Budget(model_turns=10**9, tool_executions=10**9)


def entry(n: int) -> TraceEntry:
    return TraceEntry(kind="tool", tool="search", args={"page": n}, result_class="ok", at=float(n))


def test_the_trace_keeps_the_last_entries_with_their_sequence_numbers() -> None:
    store = MemoryStore(trace_limit=3)
    store.ensure_task("t", BIG)
    for n in range(1, 8):
        store.append_trace("t", entry(n))
    assert [(e.seq, e.args) for e in store.trace("t")] == [(5, {"page": 5}), (6, {"page": 6}), (7, {"page": 7})]
    assert MemoryStore().trace_limit == DEFAULT_TRACE_LIMIT == 1000
    everything = MemoryStore(trace_limit=None)
    everything.ensure_task("t", BIG)
    for n in range(1, 2001):
        everything.append_trace("t", entry(n))
    assert [e.seq for e in everything.trace("t")] == list(range(1, 2001))


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_a_trace_limit_that_is_not_a_positive_int_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="trace_limit must be an int >= 1 or None"):
        MemoryStore(trace_limit=bad)


def guarded_turn(guard: Guard, n: int) -> None:
    """One model turn and one guarded read that advances the revision (new arguments each time)."""
    assert guard.begin_turn() is None
    ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": f"order {n}"}})
    assert isinstance(ticket, Ticket), ticket
    verdict = guard.settle(
        ticket, {"status": "ok", "n": n}, lambda c, r: {"revision": n, "done": False, "effect": "none"}
    )
    assert verdict is None, verdict


LIMIT = 50


def test_memory_does_not_grow_past_the_bound_over_10000_turns() -> None:
    store = MemoryStore(trace_limit=LIMIT)
    guard = Guard(budget=BIG, store=store, task_id="long")
    for n in range(1, 2001):
        guarded_turn(guard, n)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(2001, 10001):
            guarded_turn(guard, n)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # 8,000 more turns keep about 1 KB each when nothing is dropped (8 MB); bounded, the store holds what it held
    assert grown < 64 * 1024, f"grew {grown} bytes over 8,000 turns"
    trace = store.trace("long")
    assert len(trace) == LIMIT and trace[-1].seq == 20_000  # two entries a turn: the model turn, the read
    task = store._tasks["long"]
    assert len(task.repeats) <= 1  # the counts of older revisions were dropped with them
    snapshot = store.task("long")
    assert snapshot is not None and (snapshot.used.models, snapshot.used.tools, snapshot.revision) == (
        10_000,
        10_000,
        10_000,
    )


# --- decisions do not change ---------------------------------------------------------------------------------------

FINGERPRINTS = st.sampled_from(["fp-a", "fp-b", "fp-c"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("turn")),
        st.tuples(st.just("exec"), FINGERPRINTS, st.integers(0, 3), st.booleans(), st.integers(0, 20)),
        st.tuples(st.just("record"), st.integers(0, 6), st.booleans(), st.lists(st.sampled_from("xyz"), max_size=2)),
        st.tuples(st.just("trace"), st.integers(0, 9)),
        st.tuples(st.just("cost"), st.floats(0, 1)),
    ),
    max_size=80,
)


def apply(store: MemoryStore, op: tuple[Any, ...], at: int) -> Any:
    kind = op[0]
    if kind == "turn":
        return store.reserve_turn("t", now=at)
    if kind == "exec":
        _, fp, max_repeats, poll, max_wait = op
        return store.reserve_execution("t", fp, max_repeats=max_repeats, now=at, max_wait=max_wait, poll=poll)
    if kind == "record":
        _, revision, pending, seen = op
        return store.record_execution("t", entry(at), revision=revision, pending=pending, seen=seen)
    if kind == "trace":
        return store.append_trace("t", entry(op[1]))
    return store.reserve_cost("t", op[1])


@settings(max_examples=200, deadline=None)
@given(ops=OPS, limit=st.integers(1, 5))
def test_a_bounded_store_decides_exactly_as_an_unbounded_one(ops: list[tuple[Any, ...]], limit: int) -> None:
    bounded, unbounded = MemoryStore(trace_limit=limit), MemoryStore(trace_limit=None)
    for store in (bounded, unbounded):
        store.ensure_task("t", Budget(model_turns=20, tool_executions=30, cost=5.0))
    for at, op in enumerate(ops):
        assert apply(bounded, op, at) == apply(unbounded, op, at), op
    assert bounded.task("t") == unbounded.task("t")
    assert bounded.trace("t") == unbounded.trace("t")[-limit:]
