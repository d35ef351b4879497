"""The synchronous core's scenarios, run on the article's prototype and on the library: the harness of the
differential tests (tests/test_core_runner.py) and of the backend contract (tests/test_store_contract.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from agents_loopguard import Budget, MemoryStore, Policy, create_runner
from agents_loopguard.store import Store
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


def library_runner(sc: Scenario, store: Store, task_id: str | None = None) -> tuple[Any, list[Any]]:
    """The library's runner for scenario ``sc`` on ``store``, and the list its executions are appended to."""
    now, execute, verify, executed = _fakes(sc)
    run = create_runner(
        budget=Budget(model_turns=sc.max_models, tool_executions=sc.max_tools, deadline=sc.deadline),
        store=store,
        now=now,
        execute=execute,
        verify=verify,
        initial_revision=sc.initial_revision,
        task_id=task_id,
        policy=Policy.prototype(),  # the prototype's own rules: Policy() cuts some loops earlier (docs/efficacy.md)
    )
    return run, executed


def run_library(sc: Scenario, rounds: int = 1) -> Observed:
    store = MemoryStore()
    run, executed = library_runner(sc, store)
    first = None
    for _ in range(rounds):
        out = run(sc.proposals)
        first = first or out
        assert out is first, "a finished runner must return the very same terminal object"
    return observed(out, store, executed)


def observed(out: Any, store: Store, executed: list[Any], task_id: str | None = None) -> Observed:
    """What the library's run returned and left in ``store``, in the prototype's terms."""
    ops = {r.operation_id: str(r.state) for r in store.operations(task_id)}
    return Observed(
        str(out.status), str(out.reason), out.revision, out.value, out.used.models, out.used.tools, ops, executed
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
