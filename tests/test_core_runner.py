"""The synchronous runner against the article's prototype: every reason, the demo, and differential properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget, MemoryStore, OperationState, Reason, Status, create_runner
from tests.support.scenarios import OK, REASONS, Boom, Scenario, both, ev, library_runner, read, scenarios, write


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
    run, executed = library_runner(sc, store)
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


@pytest.mark.parametrize("limit", ["cost", "input_tokens", "output_tokens", "total_tokens"])
def test_r2_a_limit_the_runner_cannot_meter_is_refused_never_ignored(limit: str) -> None:
    """create_runner sends no model request, so a cost or token limit could never be charged: refused at the call."""
    budget = Budget(model_turns=3, tool_executions=3, **{limit: 10})
    with pytest.raises(ValueError, match=f"cannot enforce the budget's {limit} limit"):
        create_runner(budget=budget, execute=lambda c: {"status": "ok"}, verify=lambda c, r: None)
