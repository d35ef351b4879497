"""The kit catches what it claims to catch: a door that breaks an invariant is reported, by name (I1-I5).

Each faulty "door" here drives the engine by hand (a :class:`~agents_loopguard.Guard` on a ``MemoryStore``) and
then breaks one invariant on purpose: a body run without a reservation, a reservation counted twice, a write run
twice, a request the task did not count, a second task, a body after the stop mark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, Guard, MemoryStore, Reason
from tests.conformance.kit import Door, Env, Observed, violations

BUDGET = Budget(model_turns=4, tool_executions=4)


def make_env(tmp_path: Path, variant: str = "run") -> Env:
    return Env(MemoryStore(), "memory", None, "t-kit", BUDGET, variant, tmp_path)  # type: ignore[arg-type]


def run_body(env: Env, guard: Guard, tool: str, operation_id: str | None = None, *, body: bool = True) -> Any:
    """One execution reserved and settled through the engine; ``body`` runs (and counts) the body in between."""
    kind = "write" if operation_id else "read"
    ticket = guard.authorize({"tool": tool, "kind": kind, "operation_id": operation_id, "args": {"n": 1}})
    if body:
        env.body(tool, operation_id)
    effect = "committed" if operation_id else "none"
    return guard.settle(
        ticket, {"status": "ok", "output": "x"}, evidence={"revision": 1, "done": False, "effect": effect}
    )


def check(env: Env, build: Any, **door: Any) -> list[str]:
    row = Door("sdk", "faulty", "a faulty door", build, **door)
    return violations(row, env, build(env))


def codes(problems: list[str]) -> set[str]:
    return {p.split(":")[0] for p in problems}


def test_a_conforming_door_has_no_violation(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    def build(env: Env) -> Observed:
        guard = Guard(budget=BUDGET, store=env.store, task_id=env.task_id)
        assert guard.begin_turn() is None
        env.count_requests(lambda: 1)
        run_body(env, guard, "lookup")
        run_body(env, guard, "refund", "refund-1")
        return env.observe(None)

    assert check(env, build) == []


@pytest.mark.parametrize("fault", ["unreserved", "twice reserved"])
def test_i1_a_body_without_its_own_reservation_is_reported(tmp_path: Path, fault: str) -> None:
    env = make_env(tmp_path)

    def build(env: Env) -> Observed:
        guard = Guard(budget=BUDGET, store=env.store, task_id=env.task_id)
        run_body(env, guard, "lookup")
        if fault == "unreserved":
            env.body("lookup")  # a second body, nothing reserved for it
        else:
            run_body(env, guard, "lookup", body=False)  # a wrapper reserving the same body again
        return env.observe(None)

    assert codes(check(env, build)) == {"I1"}


def test_i2_a_write_run_twice_is_reported(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    def build(env: Env) -> Observed:
        guard = Guard(budget=BUDGET, store=env.store, task_id=env.task_id)
        run_body(env, guard, "refund", "refund-1")
        other = Guard(budget=BUDGET, store=env.store, task_id=env.task_id)
        run_body(env, other, "refund", "refund-2")
        env.writes["refund-1"] += 1  # the receiver saw the first write again
        return env.observe(None)

    assert "I2" in codes(check(env, build))


def test_i3_a_request_the_task_did_not_count_is_reported(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    def build(env: Env) -> Observed:
        guard = Guard(budget=BUDGET, store=env.store, task_id=env.task_id)
        assert guard.begin_turn() is None
        env.count_requests(lambda: 2)  # the server received two requests, one reserved
        return env.observe(None)

    assert codes(check(env, build)) == {"I3"}


def test_i4_another_task_or_another_answer_is_reported(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    def build(env: Env) -> Observed:
        Guard(budget=BUDGET, store=env.store, task_id=env.task_id).begin_turn()
        Guard(budget=BUDGET, store=env.store, task_id="a-fresh-budget").begin_turn()  # a nested run's new task
        seen = env.observe(None)
        seen.final = "the helper's answer"
        return seen

    problems = check(env, build, final="the parent's answer")
    assert codes(problems) == {"I4"} and len(problems) == 2


def test_i5_a_body_or_a_request_after_the_stop_mark_is_reported(tmp_path: Path) -> None:
    env = make_env(tmp_path, "stop")
    requests = [0]

    def build(env: Env) -> Observed:
        guard = Guard(budget=BUDGET, store=env.store, task_id=env.task_id)
        env.count_requests(lambda: requests[0])
        assert guard.begin_turn() is None
        requests[0] += 1
        run_body(env, guard, "lookup")  # the first checkpoint: the mark is set here
        env.body("lookup")  # a body that ignored the mark (and ran unreserved)
        requests[0] += 1  # a request that ignored it
        return env.observe(None)

    problems = check(env, build, stop_reason=Reason.STOP_REQUESTED)
    assert [p for p in problems if p.startswith("I5")] == [
        "I5: 1 bodies ran after the stop mark was set",
        "I5: 1 model requests were sent after the stop mark was set",
        "I5: the stopped run ended None, not stop_requested",
    ]


def test_a_refused_door_must_name_the_fix_and_run_nothing(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    def build(env: Env) -> Observed:
        env.body("lookup")
        seen = env.observe(None)
        seen.refused = "something went wrong"
        return seen

    problems = check(env, build, mark="refused", refusal="pass unguarded=")
    assert len(problems) == 2
