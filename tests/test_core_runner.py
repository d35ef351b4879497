"""The synchronous runner against the article's prototype: every reason, the demo, and differential properties."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget, MemoryStore, OperationState, Reason, Status, create_runner
from tests import prototype


class Boom(Exception):
    pass


@dataclass
class Scenario:
    """Inputs for one run: the same for the prototype and for the library."""

    proposals: list[Any]
    results: list[Any] = field(default_factory=list)
    """What execute returns, in order (an exception instance is raised)."""
    evidence: list[Any] = field(default_factory=list)
    """What verify returns, in order (an exception instance is raised)."""
    max_models: int = 10
    max_tools: int = 10
    deadline: float = 100.0
    start: float = 0.0
    tick: float = 1.0
    """Clock advance per execution."""
    initial_revision: int = 0


@dataclass
class Observed:
    status: str
    reason: str
    revision: int
    value: Any
    models: int
    tools: int
    ledger: dict[str, str]
    executions: list[Any]


def _fakes(sc: Scenario) -> tuple[Any, Any, Any, list[Any]]:
    clock = {"t": sc.start}
    results, evidence = list(sc.results), list(sc.evidence)
    executed: list[Any] = []

    def now() -> float:
        return clock["t"]

    def execute(call: Any) -> Any:
        executed.append(call)
        clock["t"] += sc.tick
        item = results.pop(0) if results else {"status": "ok", "n": len(executed)}
        if isinstance(item, BaseException):
            raise item
        return item

    def verify(call: Any, result: Any) -> Any:
        item = evidence.pop(0) if evidence else {"revision": 0, "done": False, "effect": "none"}
        if isinstance(item, BaseException):
            raise item
        return item

    return now, execute, verify, executed


def run_prototype(sc: Scenario, rounds: int = 1) -> Observed:
    now, execute, verify, executed = _fakes(sc)
    budget = {"models": 0, "tools": 0, "maxModels": sc.max_models, "maxTools": sc.max_tools, "deadline": sc.deadline}
    ledger: dict[str, Any] = {}
    run = prototype.create_runner(
        budget=budget, ledger=ledger, now=now, execute=execute, verify=verify, initial_revision=sc.initial_revision
    )
    for _ in range(rounds):
        out = run(sc.proposals)
    return Observed(
        out["status"],
        out["reason"],
        out["revision"],
        out["value"],
        out["used"]["models"],
        out["used"]["tools"],
        {k: v["state"] for k, v in ledger.items()},
        executed,
    )


def run_library(sc: Scenario, rounds: int = 1) -> Observed:
    now, execute, verify, executed = _fakes(sc)
    store = MemoryStore()
    run = create_runner(
        budget=Budget(model_turns=sc.max_models, tool_executions=sc.max_tools, deadline=sc.deadline),
        store=store,
        now=now,
        execute=execute,
        verify=verify,
        initial_revision=sc.initial_revision,
    )
    first = None
    for _ in range(rounds):
        out = run(sc.proposals)
        first = first or out
        assert out is first, "a finished runner must return the very same terminal object"
    return Observed(
        str(out.status),
        str(out.reason),
        out.revision,
        out.value,
        out.used.models,
        out.used.tools,
        {r.operation_id: str(r.state) for r in store.operations()},
        executed,
    )


def both(sc: Scenario) -> Observed:
    proto, lib = run_prototype(sc), run_library(sc)
    assert (lib.status, lib.reason) == (proto.status, proto.reason)
    assert lib.revision == proto.revision
    assert lib.value == proto.value
    assert (lib.models, lib.tools) == (proto.models, proto.tools)
    assert lib.ledger == proto.ledger
    assert len(lib.executions) == len(proto.executions)
    return lib


def read(q: Any = "x", tool: str = "search") -> dict[str, Any]:
    return {"tool": tool, "kind": "read", "args": {"q": q}}


def write(amount: Any = 5, op: Any = "order-42-confirm") -> dict[str, Any]:
    return {"tool": "save", "kind": "write", "operation_id": op, "args": {"amount": amount}}


def ev(revision: Any = 0, done: Any = False, effect: Any = "none") -> dict[str, Any]:
    return {"revision": revision, "done": done, "effect": effect}


OK = {"status": "ok"}


def test_article_demo_two_identical_writes_execute_once() -> None:
    """Rules: R10 (writes and the ledger)."""
    receipts: dict[str, Any] = {}
    clock = {"t": 0}

    def execute(call: Any) -> Any:
        clock["t"] += 1
        receipts["fake-order-42"] = {
            "payload": (call["tool"], call["args"]),
            "revision": 1,
            "done": True,
            "effect": "committed",
        }
        return {"status": "ok", "receipt": "fake-order-42"}

    def verify(call: Any, result: Any) -> Any:
        proof = receipts.get(result["receipt"])
        if not proof or proof["payload"] != (call["tool"], call["args"]):
            raise ValueError("invalid receipt")
        return proof

    store = MemoryStore()
    run = create_runner(
        budget=Budget(model_turns=6, tool_executions=4, deadline=100),
        store=store,
        now=lambda: clock["t"],
        execute=execute,
        verify=verify,
    )
    proposals = [write(5), write(5)]
    outcome = run(proposals)
    assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.COMPLETED, Reason.VALIDATED_DONE, 1)
    assert store.lookup_operation("order-42-confirm").state is OperationState.COMMITTED
    again = run(proposals)
    assert again is outcome and again.used.tools == 1


# One scenario per reason of the prototype; each runs on the prototype and on the library.
REASONS: dict[str, Scenario] = {
    "deadline": Scenario([read()], start=100.0),
    "model_budget": Scenario([read("a"), read("b")], evidence=[ev(1), ev(2)], max_models=1),
    "invalid_call": Scenario([{"tool": "search", "kind": "delete", "args": {}}]),
    "missing_operation_id": Scenario([write(op="")]),
    "operation_conflict": Scenario([write(5), write(6)], evidence=[ev(1, effect="committed")]),
    "unknown_commit": Scenario([write(5), write(5)], evidence=[ev(1, effect="unknown")]),
    "same_call": Scenario([read(), read(), read()]),
    "tool_budget": Scenario([read("a"), read("b")], evidence=[ev(1), ev(2)], max_tools=1),
    "executor_exception": Scenario([read()], results=[Boom("down")]),
    "invalid_result": Scenario([read()], results=[{"status": "maybe"}]),
    "invalid_evidence": Scenario([read()], evidence=[{"revision": 1.5, "done": False, "effect": "none"}]),
    "fatal": Scenario([read()], results=[{"status": "fatal"}]),
    "approval": Scenario([read()], results=[{"status": "needs_human"}]),
    "validated_done": Scenario([read()], evidence=[ev(1, done=True)]),
    "retry_after_commit": Scenario([write(5)], results=[{"status": "retryable"}], evidence=[ev(1, effect="committed")]),
    "no_progress": Scenario([read("a"), read("b"), read("c"), read("d")]),
    "plan_exhausted": Scenario([read("a")], evidence=[ev(1)]),
}

EXPECTED_STATUS = {
    "unknown_commit": "needs_reconciliation",
    "retry_after_commit": "needs_reconciliation",
    "approval": "needs_human",
    "validated_done": "completed",
    "plan_exhausted": "partial",
}


@pytest.mark.parametrize("reason", sorted(REASONS))
def test_each_prototype_reason(reason: str) -> None:
    lib = both(REASONS[reason])
    assert lib.reason == reason
    assert lib.status == EXPECTED_STATUS.get(reason, "stopped")


def test_all_seventeen_prototype_reasons_are_covered() -> None:
    assert len(REASONS) == 17


@pytest.mark.parametrize(
    "name,sc,status",
    [
        ("write exception leaves unknown", Scenario([write()], results=[Boom("timeout")]), "needs_reconciliation"),
        ("write invalid result", Scenario([write()], results=[None]), "needs_reconciliation"),
        ("write invalid evidence", Scenario([write()], evidence=[Boom("verifier down")]), "needs_reconciliation"),
        ("revision goes back", Scenario([read("a"), read("b")], evidence=[ev(2), ev(1)]), "stopped"),
        (
            "done with retryable",
            Scenario([read()], results=[{"status": "retryable"}], evidence=[ev(1, True)]),
            "stopped",
        ),
        ("deadline after execution", Scenario([read()], deadline=0.5, evidence=[ev(3)]), "stopped"),
        (
            "done write not committed",
            Scenario([write()], evidence=[ev(1, True, "not_committed")]),
            "needs_reconciliation",
        ),
        (
            "not committed then retried",
            Scenario([write(), write()], evidence=[ev(0, False, "not_committed"), ev(1, True, "committed")]),
            "completed",
        ),
        (
            "committed replay not re-executed",
            Scenario(
                [write(), write(), read("z")],
                evidence=[ev(1, False, "committed"), ev(1, False, "committed"), ev(2, True)],
            ),
            "completed",
        ),
        (
            "replay needs committed evidence",
            Scenario([write(), write()], evidence=[ev(1, False, "committed"), ev(1, False, "none")]),
            "needs_reconciliation",
        ),
        ("truthy garbage evidence", Scenario([read()], evidence=["yes"]), "stopped"),
        ("bool revision", Scenario([read()], evidence=[ev(True)]), "stopped"),
        ("initial revision respected", Scenario([read()], evidence=[ev(1)], initial_revision=3), "stopped"),
        ("float integral revision", Scenario([read()], evidence=[ev(2.0, True)]), "completed"),
        ("null proposal", Scenario([None]), "stopped"),
        ("non-json args", Scenario([{"tool": "t", "kind": "read", "args": {"x": float("nan")}}]), "stopped"),
    ],
)
def test_edge_cases_match_prototype(name: str, sc: Scenario, status: str) -> None:
    assert both(sc).status == status, name


def test_committed_write_is_not_executed_again_across_runners() -> None:
    store = MemoryStore()
    calls: list[Any] = []

    def make() -> Any:
        return create_runner(
            budget=Budget(model_turns=5, tool_executions=5),
            store=store,
            now=lambda: 0,
            execute=lambda c: calls.append(c) or {"status": "ok", "id": 7},
            verify=lambda c, r: ev(1, False, "committed"),
        )

    make()([write()])
    second = make()([write()])
    assert len(calls) == 1
    assert second.value == {"status": "ok", "id": 7}
    assert store.lookup_operation("order-42-confirm").state is OperationState.COMMITTED


def test_finished_runner_is_sticky_even_after_an_exception_in_the_caller() -> None:
    """Rules: R11 (outcomes)."""
    run = create_runner(
        budget=Budget(model_turns=1, tool_executions=1), now=lambda: 0, execute=lambda c: OK, verify=lambda c, r: ev()
    )
    first = run([read("a"), read("b")])
    try:
        raise RuntimeError("caller's own error")
    except RuntimeError:
        pass
    assert run([read("c")]) is first
    assert first.used.models == 1 and first.reason is Reason.MODEL_BUDGET


# --- differential property tests ----------------------------------------------------------------------

tools = st.sampled_from(["search", "save", "pay"])
scalar = st.one_of(st.integers(-3, 3), st.sampled_from([1.5, 5.0, "a", "b", True, None]))
args = st.one_of(
    st.dictionaries(st.sampled_from(["q", "amount", "customer"]), scalar, max_size=2),
    st.sampled_from([None, 0, "", False]),
)
op_ids = st.one_of(st.sampled_from(["op-1", "op-2", "op-3"]), st.sampled_from(["", None, 7]))
proposal = st.one_of(
    st.fixed_dictionaries(
        {"tool": tools, "kind": st.sampled_from(["read", "write"]), "args": args, "operation_id": op_ids}
    ),
    st.fixed_dictionaries(
        {"tool": st.one_of(tools, st.integers()), "kind": st.sampled_from(["read", "write", "x"]), "args": args}
    ),
    st.sampled_from([None, 0, "garbage", []]),
)
result = st.one_of(
    st.fixed_dictionaries(
        {
            "status": st.sampled_from(["ok", "ok", "ok", "retryable", "fatal", "needs_human", "bad"]),
            "v": st.integers(0, 3),
        }
    ),
    st.sampled_from([None, 0, "", "ok", [], {"no": "status"}]),
    st.just(Boom("exec")),
)
evidence = st.one_of(
    st.fixed_dictionaries(
        {
            "revision": st.one_of(st.integers(-1, 4), st.sampled_from([1.0, 2.5, True, None, "1", float("inf")])),
            "done": st.one_of(st.booleans(), st.sampled_from([None, 1, "true"])),
            "effect": st.sampled_from(["none", "committed", "not_committed", "unknown", "committed", "bogus", None]),
        }
    ),
    st.sampled_from([None, 0, "", "yes", [], {}]),
    st.just(Boom("verify")),
)
scenarios = st.builds(
    Scenario,
    proposals=st.lists(proposal, max_size=12),
    results=st.lists(result, max_size=12),
    evidence=st.lists(evidence, max_size=12),
    max_models=st.integers(0, 10),
    max_tools=st.integers(0, 8),
    deadline=st.sampled_from([3.0, 6.0, 100.0]),
    tick=st.sampled_from([0.0, 1.0]),
    initial_revision=st.integers(0, 2),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_differential_against_prototype(sc: Scenario) -> None:
    """Rules: R6 (progress is decided by the application), R7 (repetition and stall), R10 (writes and the ledger), R11
    (outcomes)."""
    both(sc)


class RecordingStore(MemoryStore):
    """Records, for every successful operation claim, the state the operation had before it."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: list[tuple[str, str | None]] = []

    def reserve_operation(self, task_id: str, operation_id: str, payload: str, tool: str, *, now: float = 0.0) -> Any:
        before = self.lookup_operation(operation_id)
        claim = super().reserve_operation(task_id, operation_id, payload, tool, now=now)
        if claim.claimed:
            self.claims.append((operation_id, str(before.state) if before else None))
        return claim


@settings(max_examples=300, deadline=None)
@given(scenarios, st.integers(1, 3))
def test_invariants_hold_for_any_input(sc: Scenario, rounds: int) -> None:
    store = RecordingStore()
    now, execute, verify, executed = _fakes(sc)
    run = create_runner(
        budget=Budget(model_turns=sc.max_models, tool_executions=sc.max_tools, deadline=sc.deadline),
        store=store,
        now=now,
        execute=execute,
        verify=verify,
        initial_revision=sc.initial_revision,
    )
    outcomes = [run(sc.proposals) for _ in range(rounds)]
    assert all(o is outcomes[0] for o in outcomes)
    snap = store.task(run.guard.task_id)
    assert snap is not None and snap.status == str(outcomes[0].status)
    assert snap.used.tools <= sc.max_tools
    assert snap.used.models <= sc.max_models
    assert len(executed) == snap.used.tools - 0  # every execution was reserved, none ran unreserved
    writes = [c for c in executed if isinstance(c, dict) and c.get("kind") == "write"]
    assert len(writes) == len(store.claims), "a write executed without claiming its operation"
    for op, before in store.claims:
        assert before in (None, "not_committed"), f"{op} executed again while {before}"
