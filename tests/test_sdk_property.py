"""Property: whatever a model proposes (repeats, parallel batches, malformed JSON, writes that fail after their
effect), a guarded SDK run returns an Outcome, every tool body that ran was a reserved execution, the limits hold,
and no business operation is sent twice, even across runs sharing the ledger."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import agents
import pytest
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget, MemoryStore, Outcome
from agents_loopguard.sdk import guarded_tool
from tests.support.sdk import guarded_outcome

agents.set_tracing_disabled(True)

calls = st.one_of(
    st.tuples(st.just("read"), st.integers(0, 3)),
    st.tuples(st.just("write"), st.integers(0, 3)),
    st.tuples(st.just("poll"), st.integers(0, 1)),
    st.tuples(st.just("malformed"), st.sampled_from(['{"k": ', "[1]", "null", '{"k": "x"}'])),
)
turns = st.lists(st.one_of(st.lists(calls, min_size=1, max_size=3), st.just("text")), min_size=1, max_size=7)


class World:
    """The application: tools whose bodies count their runs, and the trusted verifiers."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.revision = 0

    def tools(self) -> list[Any]:
        @guarded_tool(verify=self.verify_read)
        async def read(k: int) -> str:
            """Read."""
            self.runs[f"read-{k}"] += 1
            await asyncio.sleep(0)
            return f"r{k}"

        @guarded_tool(kind="write", operation_id=lambda a: f"w-{a['k']}", verify=self.verify_write)
        async def write(k: int) -> str:
            """Write; k == 3 loses its answer after the effect."""
            self.runs[f"w-{k}"] += 1
            await asyncio.sleep(0)
            if k == 3:
                raise TimeoutError("answer lost")
            return f"w{k}"

        @guarded_tool(kind="poll", verify=lambda a, out: {"revision": self.revision, "done": False, "effect": "none"})
        def poll(k: int) -> str:
            """Poll a job (sync: runs in a thread)."""
            self.runs[f"poll-{k}"] += 1
            return "pending"

        return [read, write, poll]

    def verify_read(self, args: dict[str, Any], output: Any) -> dict[str, Any]:
        self.revision = max(self.revision, int(args["k"]))
        return {"revision": self.revision, "done": False, "effect": "none"}

    def verify_write(self, args: dict[str, Any], output: Any) -> dict[str, Any]:
        self.revision += 1
        return {"revision": self.revision, "done": self.revision >= 4, "effect": "committed"}


def script(plan: list[Any], prefix: str) -> list[Any]:
    steps: list[Any] = []
    for t, turn in enumerate(plan):
        if turn == "text":
            steps.append([assistant_message("an answer")])
            continue
        batch = []
        for i, (tool, arg) in enumerate(turn):
            cid = f"{prefix}{t}_{i}"
            if tool == "malformed":
                batch.append(function_call("read", arg, call_id=cid))
            else:
                batch.append(function_call(tool, {"k": arg}, call_id=cid))
        steps.append(batch)
    return [*steps, [assistant_message("final")]]


async def guarded(world: World, plan: list[Any], prefix: str, stream: bool, **kwargs: Any) -> Outcome:
    steps = script(plan, prefix)
    model = ScriptedModel(steps)
    agent = agents.Agent(name="a", model=model, tools=world.tools())
    kwargs["max_turns"] = len(steps)  # the script never runs dry: the SDK's limit comes first
    outcome = await guarded_outcome(agent, "go", stream=stream, **kwargs)
    assert len(model.calls) == outcome.used.models  # every attempt sent was reserved, and only those
    return outcome


@pytest.mark.timeout(300)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=turns,
    model_turns=st.integers(1, 8),
    tool_executions=st.integers(0, 6),
    mode=st.sampled_from(["end", "continue"]),
    stream=st.booleans(),
)
def test_a_guarded_run_always_ends_with_an_outcome_within_its_limits(
    plan: list[Any], model_turns: int, tool_executions: int, mode: Any, stream: bool
) -> None:
    world = World()
    store = MemoryStore()
    budget = Budget(model_turns=model_turns, tool_executions=tool_executions)
    outcomes = []
    for attempt in ("first", "again"):  # a second task replays the same proposals on the same ledger
        before = sum(world.runs.values())
        outcome = asyncio.run(
            guarded(world, plan, attempt, stream, budget=budget, store=store, task_id=attempt, on_refusal=mode)
        )
        assert isinstance(outcome, Outcome)
        assert sum(world.runs.values()) - before == outcome.used.tools  # bodies run == executions reserved
        assert outcome.used.tools <= tool_executions and outcome.used.models <= model_turns
        outcomes.append(outcome)
    writes = {name: n for name, n in world.runs.items() if name.startswith("w-")}
    assert all(n == 1 for n in writes.values()), writes  # committed or unknown: never sent twice
    for record in store.operations():
        assert world.runs[record.operation_id] == 1
