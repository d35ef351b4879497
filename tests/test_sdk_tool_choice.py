"""tool_choice release (R12): once no work remains, the very next model request no longer forces a tool.

Shown with ScriptedModel (which records the settings each attempt received); the same scenario over real HTTP,
asserting the tool_choice on the wire, is in test_sdk_http.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import agents
import pytest
from agents import Agent, MaxTurnsExceeded, ModelSettings, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, Reason, Status
from agents_loopguard.sdk import guarded_tool, run_guarded
from tests.support.sdk import done_at_two, guarded_outcome

pytestmark = pytest.mark.timeout(30)
agents.set_tracing_disabled(True)

BUDGET = Budget(model_turns=10, tool_executions=10)


def check_order(order: int) -> str:
    """Check an order; the second check finds everything in place."""
    return f"order {order} checked"


guarded_check = guarded_tool(verify=done_at_two)(check_order)


def forced(model: ScriptedModel, tool: Any, choice: Any = "required") -> Agent[Any]:
    return Agent(
        name="clerk",
        model=model,
        tools=[tool],
        model_settings=ModelSettings(tool_choice=choice),
        reset_tool_choice=False,
    )


def script(n: int, *, spare: int = 3) -> list[Any]:
    """A model that obeys tool_choice: it calls the tool while it is forced to (or, when free, until it has checked
    ``n`` orders), and answers as soon as it may. (ScriptedModel itself ignores tool_choice.)"""

    def turn(i: int) -> ModelStep:
        def respond(call: Any) -> list[Any]:
            choice = call.model_settings.tool_choice
            if choice == "none" or (choice in (None, "auto") and i > n):
                return [assistant_message("All orders are checked.")]
            return [function_call("check_order", {"order": i}, call_id=f"c{i}")]

        return ModelStep.respond(respond)

    return [turn(i) for i in range(1, n + spare + 1)]


def sent_choices(model: ScriptedModel) -> list[Any]:
    return [call.model_settings.tool_choice for call in model.calls]


async def streamed(agent: Agent[Any], **kwargs: Any) -> Any:
    return await guarded_outcome(agent, "check the orders", stream=True, **kwargs)


def test_without_the_guard_a_forced_tool_choice_loops_to_max_turns() -> None:
    model = ScriptedModel(script(5))
    with pytest.raises(MaxTurnsExceeded):
        asyncio.run(Runner.run(forced(model, function_tool(check_order)), "check the orders", max_turns=4))
    assert sent_choices(model) == ["required"] * 4


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
def test_with_the_guard_validated_done_releases_tool_choice_and_the_run_completes(stream: bool) -> None:
    """Rules: R12 (tool_choice)."""
    model = ScriptedModel(script(2))
    agent = forced(model, guarded_check)
    if stream:
        outcome = asyncio.run(streamed(agent, budget=BUDGET, max_turns=4))
    else:
        outcome = asyncio.run(run_guarded(agent, "check the orders", budget=BUDGET, max_turns=4))
    assert (outcome.status, outcome.reason, outcome.value) == (
        Status.COMPLETED,
        Reason.VALIDATED_DONE,
        "order 2 checked",
    )
    assert outcome.result.final_output == "All orders are checked."
    assert sent_choices(model) == ["required", "required", "none"]
    assert agent.model_settings.tool_choice == "required"  # the application's settings are untouched


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
def test_an_exhausted_tool_budget_releases_tool_choice(stream: bool) -> None:
    """Rules: R12 (tool_choice)."""
    model = ScriptedModel(script(1))
    budget = Budget(model_turns=10, tool_executions=1)
    agent = forced(model, guarded_tool(check_order))
    if stream:
        outcome = asyncio.run(streamed(agent, budget=budget, release_tool_choice="auto"))
    else:
        outcome = asyncio.run(run_guarded(agent, "check", budget=budget, release_tool_choice="auto"))
    # the model could answer: not completed (nothing validated done), but partial with the verified value
    assert (outcome.status, outcome.reason, outcome.value) == (
        Status.PARTIAL,
        Reason.UNVERIFIED_FINAL,
        "order 1 checked",
    )
    assert sent_choices(model) == ["required", "auto"]


def test_the_last_model_turn_does_not_force_a_tool_nobody_could_read() -> None:
    """Rules: R12 (tool_choice)."""
    model = ScriptedModel(script(3))
    outcome = asyncio.run(run_guarded(forced(model, guarded_tool(check_order)), "check", budget=Budget(2, 10)))
    assert sent_choices(model) == ["required", "none"]
    assert (outcome.status, outcome.used.models, outcome.used.tools) == (Status.PARTIAL, 2, 1)


def test_a_forced_function_is_released_like_required() -> None:
    """Rules: R12 (tool_choice)."""
    model = ScriptedModel(script(2))
    outcome = asyncio.run(run_guarded(forced(model, guarded_check, choice="check_order"), "check", budget=BUDGET))
    assert sent_choices(model) == ["check_order", "check_order", "none"]
    assert outcome.status is Status.COMPLETED


def test_tool_choice_auto_is_kept_while_work_remains_then_released_like_the_raw_loop() -> None:
    """R12, one rule for both adapters: once no work remains the request offers no tool call at all (the raw loop
    always did this; the SDK adapter used to leave ``auto``, so a model could spend a turn on a refused call)."""
    model = ScriptedModel(script(2))
    outcome = asyncio.run(run_guarded(forced(model, guarded_check, choice="auto"), "check", budget=BUDGET))
    assert sent_choices(model) == ["auto", "auto", "none"] and outcome.status is Status.COMPLETED
