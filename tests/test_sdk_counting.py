"""Counting (R1, R2) and the stop mark (R3) in SDK runs: every model attempt and every tool execution is reserved
before it happens, across retries, parallel batches, handoffs, agents used as tools and runs of the same task."""

from __future__ import annotations

import asyncio
from typing import Any

import agents
import httpx2
import openai
import pytest
from agents import (
    Agent,
    ModelRetrySettings,
    ModelSettings,
    RunConfig,
    RunHooks,
    ToolExecutionConfig,
    function_tool,
    handoff,
    retry_policies,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, MemoryStore, Reason, Status
from agents_loopguard.sdk import current_guard, guarded_tool, run_guarded
from tests.support.sdk import guarded_outcome

pytestmark = pytest.mark.timeout(30)
agents.set_tracing_disabled(True)

BUDGET = Budget(model_turns=20, tool_executions=20)
ran: list[str] = []


def network_error() -> Exception:
    return openai.APIConnectionError(request=httpx2.Request("POST", "https://example.invalid/v1/responses"))


def retrying(max_retries: int, policy: Any = None) -> ModelSettings:
    return ModelSettings(
        retry=ModelRetrySettings(
            max_retries=max_retries,
            backoff={"initial_delay": 0, "jitter": False},
            policy=policy or retry_policies.network_error(),
        )
    )


def progress(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": int(args["n"]), "done": False, "effect": "none"}


@guarded_tool(verify=progress)
async def work(n: int) -> str:
    """Do one unit of work."""
    await asyncio.sleep(0.01)
    ran.append(f"work-{n}")
    return f"did {n}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


class CountingHooks(RunHooks[Any]):
    def __init__(self) -> None:
        self.llm_starts = 0

    async def on_llm_start(self, *_args: Any) -> None:
        self.llm_starts += 1


# --- model attempts -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_every_model_attempt_is_counted_sdk_retries_included(stream: bool) -> None:
    """Rules: R2 (separate counters)."""
    model = ScriptedModel([network_error(), network_error(), [assistant_message("hi")]])
    agent = Agent(name="a", model=model, model_settings=retrying(3))
    hooks = CountingHooks()

    outcome = asyncio.run(guarded_outcome(agent, "go", stream=stream, budget=BUDGET, hooks=hooks))
    assert (outcome.status, outcome.used.models) == (Status.PARTIAL, 3)  # three attempts, one turn
    assert hooks.llm_starts == 1 and len(model.calls) == 3
    assert outcome.result.context_wrapper.usage.requests == 3


def test_retries_cannot_overshoot_the_model_budget_and_a_refusal_is_never_retried() -> None:
    """Rules: R1 (gate before execution), R2 (separate counters)."""
    model = ScriptedModel([network_error()] * 5 + [[assistant_message("hi")]])
    agent = Agent(name="a", model=model, model_settings=retrying(5, policy=lambda _ctx: True))  # retry anything
    outcome = asyncio.run(run_guarded(agent, "go", budget=Budget(model_turns=2, tool_executions=2)))
    assert (outcome.status, outcome.reason, outcome.used.models) == (Status.STOPPED, Reason.MODEL_BUDGET, 2)
    assert len(model.calls) == 2  # the third attempt was refused before it was sent, and not retried


def test_a_run_config_model_and_a_provider_model_are_guarded_too() -> None:
    model = ScriptedModel([[function_call("work", {"n": 1}, call_id="c1")], [assistant_message("hi")]])
    agent = Agent(name="a", model="some-model-name", tools=[work])
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET, run_config=RunConfig(model=model)))
    assert (outcome.used.models, outcome.used.tools) == (2, 1)

    class Provider(agents.ModelProvider):
        def get_model(self, model_name: str | None) -> agents.Model:
            return provided

    provided = ScriptedModel([[assistant_message("hi")]])
    outcome = asyncio.run(
        run_guarded(Agent(name="b", model="x"), "go", budget=BUDGET, run_config={"model_provider": Provider()})
    )
    assert outcome.used.models == 1 and len(provided.calls) == 1


# --- tool executions ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["end", "continue"])
def test_a_parallel_batch_cannot_overshoot_the_tool_budget(mode: Any) -> None:
    """Rules: R1 (gate before execution), R2 (separate counters)."""
    batch = [function_call("work", {"n": i}, call_id=f"c{i}") for i in range(1, 7)]
    agent = Agent(name="a", model=ScriptedModel([batch, [assistant_message("done")]]), tools=[work])
    outcome = asyncio.run(run_guarded(agent, "go", budget=Budget(model_turns=5, tool_executions=3), on_refusal=mode))
    assert outcome.used.tools == 3 and len(ran) == 3  # three reserved, three bodies ran, none was cancelled
    expected = (Status.STOPPED, Reason.TOOL_BUDGET) if mode == "end" else (Status.PARTIAL, Reason.UNVERIFIED_FINAL)
    assert (outcome.status, outcome.reason) == expected


def test_a_stop_inside_a_batch_lets_the_siblings_finish_and_ends_before_the_next_model_call() -> None:
    @guarded_tool
    async def fails(n: int) -> str:
        """Fails while its siblings are running."""
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    batch = [function_call("fails", {"n": 0}, call_id="c0")] + [
        function_call("work", {"n": i}, call_id=f"c{i}") for i in (1, 2)
    ]
    model = ScriptedModel([batch, [assistant_message("never")]])
    outcome = asyncio.run(run_guarded(Agent(name="a", model=model, tools=[fails, work]), "go", budget=BUDGET))
    assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.STOPPED, Reason.EXECUTOR_EXCEPTION, 3)
    assert sorted(ran) == ["work-1", "work-2"] and len(model.calls) == 1 and outcome.in_flight == ()


def test_plain_function_tools_in_the_graph_are_guarded_as_reads() -> None:
    calls_seen: list[str] = []

    @function_tool
    def plain(q: str) -> str:
        """An undeclared tool."""
        calls_seen.append(q)
        return "same answer"

    script = [[function_call("plain", {"q": "x"}, call_id=f"c{i}")] for i in range(5)] + [[assistant_message("x")]]
    agent = Agent(name="a", model=ScriptedModel(script), tools=[plain])
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET))
    assert (outcome.reason, outcome.used.tools, calls_seen) == (Reason.SAME_CALL, 2, ["x", "x"])
    assert agent.tools == [plain]  # the application's agent is untouched


def test_the_task_budget_spans_runs() -> None:
    """Rules: R2 (separate counters)."""
    store = MemoryStore()
    budget = Budget(model_turns=20, tool_executions=3)

    def agent(first: int) -> Agent[Any]:
        script = [[function_call("work", {"n": first + i}, call_id=f"c{i}")] for i in range(2)]
        return Agent(name="a", model=ScriptedModel([*script, [assistant_message("x")]]), tools=[work])

    one = asyncio.run(run_guarded(agent(1), "go", budget=budget, store=store, task_id="t"))
    assert (one.status, one.used.tools) == (Status.PARTIAL, 2)
    store.recover("t", who="test", why="another run of the same task")
    two = asyncio.run(run_guarded(agent(3), "go", budget=budget, store=store, task_id="t"))
    assert (two.status, two.reason, two.used.tools, two.used.models) == (Status.STOPPED, Reason.TOOL_BUDGET, 3, 5)


# --- the stop mark ------------------------------------------------------------------------------------------


def stop_from_elsewhere(reason: str = "operator") -> None:
    guard = current_guard()
    assert guard is not None
    guard.store.request_stop(guard.task_id, reason)


def test_the_stop_mark_is_checked_before_the_next_model_call() -> None:
    """Rules: R3 (shared stop mark)."""

    @guarded_tool
    def stopper(n: int) -> str:
        """Another process stops the task while this runs."""
        stop_from_elsewhere()
        return "stopped?"

    script = [[function_call("stopper", {"n": 1}, call_id="c1")], [assistant_message("never")]]
    model = ScriptedModel(script)
    outcome = asyncio.run(run_guarded(Agent(name="a", model=model, tools=[stopper]), "go", budget=BUDGET))
    assert (outcome.status, outcome.reason, outcome.used.models) == (Status.STOPPED, Reason.STOP_REQUESTED, 1)
    assert len(model.calls) == 1


def test_the_stop_mark_is_checked_before_every_tool_execution() -> None:
    """Rules: R3 (shared stop mark)."""

    @guarded_tool
    def stopper(n: int) -> str:
        """Stops the task."""
        stop_from_elsewhere()
        return "x"

    batch = [function_call("stopper", {"n": 1}, call_id="c1"), function_call("work", {"n": 2}, call_id="c2")]
    agent = Agent(name="a", model=ScriptedModel([batch, [assistant_message("x")]]), tools=[stopper, work])
    one_at_a_time = RunConfig(tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1))
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET, run_config=one_at_a_time))
    assert (outcome.reason, outcome.used.tools, ran) == (Reason.STOP_REQUESTED, 1, [])


def test_the_stop_mark_is_checked_before_a_handoff() -> None:
    """Rules: R3 (shared stop mark)."""
    specialist_model = ScriptedModel([[assistant_message("never")]])
    specialist = Agent(name="specialist", model=specialist_model)

    def triage_turn(_call: Any) -> Any:
        guard = ACTIVE[0]
        guard.store.request_stop(guard.task_id, "operator")  # marked while the model was answering
        return [function_call("transfer_to_specialist", {}, call_id="h1")]

    ACTIVE: list[Any] = []
    triage = Agent(name="triage", model=ScriptedModel([ModelStep.respond(triage_turn)]), handoffs=[specialist])
    from agents_loopguard import Guard

    guard = Guard(budget=BUDGET)
    ACTIVE.append(guard)
    outcome = asyncio.run(run_guarded(triage, "go", guard=guard))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.STOP_REQUESTED)
    assert specialist_model.calls == ()


# --- handoffs and agents as tools ---------------------------------------------------------------------------


def test_handoff_targets_models_and_tools_are_counted() -> None:
    @function_tool
    def plain(q: str) -> str:
        """Undeclared tool of the specialist."""
        ran.append(q)
        return "plain"

    specialist_model = ScriptedModel(
        [
            [function_call("work", {"n": 1}, call_id="s1"), function_call("plain", {"q": "p"}, call_id="s2")],
            [assistant_message("specialist answer")],
        ]
    )
    specialist = Agent(name="specialist", model=specialist_model, tools=[work, plain])
    billing = Agent(name="billing", model=ScriptedModel([[assistant_message("never")]]))
    triage_model = ScriptedModel([[function_call("transfer_to_specialist", {}, call_id="h1")]])
    triage = Agent(name="triage", model=triage_model, handoffs=[handoff(specialist), billing])
    outcome = asyncio.run(run_guarded(triage, "go", budget=BUDGET))
    assert (outcome.used.models, outcome.used.tools) == (3, 2)
    assert outcome.result.last_agent.name == "specialist" and outcome.result.final_output == "specialist answer"


def test_handoffs_may_form_a_cycle() -> None:
    a_model = ScriptedModel([[function_call("transfer_to_b", {}, call_id="h1")], [assistant_message("back in a")]])
    b_model = ScriptedModel([[function_call("transfer_to_a", {}, call_id="h2")]])
    a = Agent(name="a", model=a_model)
    b = Agent(name="b", model=b_model, handoffs=[a])
    a.handoffs = [b]
    outcome = asyncio.run(run_guarded(a, "go", budget=BUDGET))
    assert (outcome.used.models, outcome.result.final_output) == (3, "back in a")


def test_an_agent_used_as_a_tool_has_its_model_and_tools_counted() -> None:
    """Rules: R2 (separate counters)."""
    inner_model = ScriptedModel([[function_call("work", {"n": 5}, call_id="i1")], [assistant_message("inner done")]])
    inner = Agent(name="researcher", model=inner_model, tools=[work])
    outer_model = ScriptedModel(
        [[function_call("research", {"input": "q"}, call_id="o1")], [assistant_message("outer done")]]
    )
    outer = Agent(name="lead", model=outer_model, tools=[inner.as_tool("research", "Research a question")])
    outcome = asyncio.run(run_guarded(outer, "go", budget=BUDGET))
    assert outcome.used.models == 4  # two outer turns, two inner turns
    assert outcome.used.tools == 2  # the agent tool itself, and the inner agent's tool
    assert ran == ["work-5"]


def test_the_model_budget_reaches_inside_an_agent_used_as_a_tool() -> None:
    """Rules: R2 (separate counters)."""
    inner_model = ScriptedModel([[function_call("work", {"n": i}, call_id=f"i{i}")] for i in range(1, 9)])
    inner = Agent(name="researcher", model=inner_model, tools=[work])
    outer_model = ScriptedModel(
        [[function_call("research", {"input": "q"}, call_id="o1")], [assistant_message("outer done")]]
    )
    outer = Agent(name="lead", model=outer_model, tools=[inner.as_tool("research", "Research a question")])
    outcome = asyncio.run(run_guarded(outer, "go", budget=Budget(model_turns=4, tool_executions=20)))
    assert (outcome.status, outcome.reason, outcome.used.models) == (Status.STOPPED, Reason.MODEL_BUDGET, 4)
    assert len(inner_model.calls) == 3 and len(outer_model.calls) == 1


def test_tools_that_appear_only_at_run_time_are_counted_by_the_hooks() -> None:
    """Rules: R2 (separate counters)."""

    @function_tool
    def runtime_tool(q: str) -> str:
        """Appears at run time, like an MCP tool."""
        ran.append(q)
        return "same"

    class RuntimeToolsAgent(Agent[Any]):
        async def get_all_tools(self, run_context: Any) -> list[Any]:
            return [*await super().get_all_tools(run_context), runtime_tool]

    script = [[function_call("runtime_tool", {"q": "x"}, call_id=f"c{i}")] for i in range(4)]
    agent = RuntimeToolsAgent(name="a", model=ScriptedModel([*script, [assistant_message("x")]]))
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET))
    assert (outcome.status, outcome.reason, outcome.used.tools, ran) == (Status.STOPPED, Reason.SAME_CALL, 2, ["x"] * 2)
