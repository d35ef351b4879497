"""The adapter on every supported openai-agents minor (0.22 to 0.24): each private SDK name it reads is present
here, and each one's fallback (agents_loopguard/sdk/private.py) keeps a real run working when the name is hidden,
as a later SDK release may rename it. Runs against the real SDK, the real openai client over HTTP and real stores.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import sys
from typing import Any

import agents
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunContextWrapper,
    RunState,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from packaging.requirements import Requirement

from agents_loopguard import Budget, Reason, Status, Usage
from agents_loopguard.sdk import guarded_tool, private, resume_guarded_sync, run_guarded, run_guarded_sync
from agents_loopguard.store import Store
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, http_error
from tests.support.sdk import committed, told_by_id
from tests.support.wire import scripted_server

pytestmark = pytest.mark.timeout(60)
agents.set_tracing_disabled(True)

server = pytest.fixture(scripted_server, name="server")
KINDS = ["responses", "chat"]


def sdk_model(kind: str, client: openai.AsyncOpenAI) -> Any:
    model_class = OpenAIChatCompletionsModel if kind == "chat" else OpenAIResponsesModel
    return model_class(model="gpt-4o-mini", openai_client=client)


def run_http(server: ScriptedOpenAIServer, kind: str, max_retries: int) -> Any:
    async def main() -> Any:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=max_retries) as client:
            agent = Agent(name="a", model=sdk_model(kind, client))
            return await run_guarded(agent, "go", budget=Budget(model_turns=5, tool_executions=0))

    return asyncio.run(main())


def test_the_installed_sdk_is_within_the_declared_pin() -> None:
    """scripts/try_newest_sdk.py deselects this one test when it installs a release past the pin on purpose."""
    [pin] = [
        r for r in map(Requirement, importlib.metadata.requires("agents-loopguard") or []) if r.name == "openai-agents"
    ]
    assert pin.specifier.contains(importlib.metadata.version("openai-agents"))
    assert pin.specifier.contains("0.22.0") and pin.specifier.contains("0.24.0")  # the minors CI proves


def test_the_installed_sdk_has_every_private_name_the_adapter_reads() -> None:
    """Fails on an SDK that renamed one of them: the fallback then runs in production, and the pin must not move
    until that loss is accepted (scripts/try_newest_sdk.py runs this file against the newest release)."""
    assert private.load_retry_switch().found
    client = openai.AsyncOpenAI(api_key="test", max_retries=5, timeout=7.0)
    assert (private.client_retries(sdk_model("chat", client)), private.client_timeout(sdk_model("chat", client))) == (
        5,
        7.0,
    )
    inner = Agent(name="inner")
    assert private.agent_of_tool(inner.as_tool(tool_name="ask", tool_description="Ask.")) is inner
    state: RunState[Any] = RunState(context={"k": 1}, original_input="go", starting_agent=inner)  # type: ignore[call-arg]
    assert private.state_context(state) is not None


# --- agents.models._retry_runtime ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_without_the_retry_switch_the_client_keeps_its_retries_and_none_is_doubled(
    server: ScriptedOpenAIServer, kind: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, private.RETRY_MODULE, None)  # the module is gone: its import fails
    with caplog.at_level(logging.WARNING, logger=private.__name__):
        switch = private.load_retry_switch()
    assert not switch.found and "not reserved by the guard" in caplog.text
    monkeypatch.setattr(private, "RETRY_SWITCH", switch)
    server.add(http_error(500), final_text("fine"))
    outcome = run_http(server, kind, max_retries=2)
    # the client's retry happened beneath the Model interface (one reserved attempt, two requests); the guard made
    # no retry of its own on top of it
    assert (outcome.status, outcome.final_output, outcome.used.models, len(server.requests)) == (
        Status.PARTIAL,
        "fine",
        1,
        2,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_with_the_retry_switch_the_same_run_has_every_request_reserved(server: ScriptedOpenAIServer, kind: str) -> None:
    """The contrast to the fallback above, on the same script: the guard takes the client's retry over."""
    server.add(http_error(500), final_text("fine"))
    outcome = run_http(server, kind, max_retries=2)
    assert (outcome.status, outcome.final_output, outcome.used.models, len(server.requests)) == (
        Status.PARTIAL,
        "fine",
        2,
        2,
    )


# --- the SDK OpenAI models' _client ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_an_unreadable_client_is_retried_as_a_default_openai_client(
    server: ScriptedOpenAIServer, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(private, "CLIENT_ATTRIBUTE", "_client_renamed_by_a_later_sdk")
    model = sdk_model(kind, openai.AsyncOpenAI(api_key="test", max_retries=0, timeout=3.0))
    assert (private.client_retries(model), private.client_timeout(model)) == (openai.DEFAULT_MAX_RETRIES, None)
    # max_retries=0 cannot be read: the guard makes the default client's retries, each reserved and sent once
    server.add(http_error(500), http_error(500), final_text("fine"))
    outcome = run_http(server, kind, max_retries=0)
    assert (outcome.status, outcome.final_output, outcome.used.models, len(server.requests)) == (
        Status.PARTIAL,
        "fine",
        3,
        3,
    )


def test_a_model_without_an_openai_client_is_never_retried_by_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(private, "CLIENT_ATTRIBUTE", "_client_renamed_by_a_later_sdk")
    assert (private.client_retries(ScriptedModel([])), private.client_timeout(ScriptedModel([]))) == (0, None)


# --- RunState._context ------------------------------------------------------------------------------------------

sent: list[tuple[int, Any]] = []


@guarded_tool(kind="write", operation_id=lambda a: f"refund-order-{a['order']}", verify=committed, needs_approval=True)
def refund(ctx: RunContextWrapper[Any], order: int) -> str:
    """Refund an order (a human approves it)."""
    sent.append((order, ctx.context))
    return f"refunded {order}"


def clerk(*steps: Any) -> Agent[Any]:
    return Agent(name="clerk", model=ScriptedModel(list(steps)), tools=[refund])


@pytest.mark.parametrize("hidden", [False, True], ids=["RunState._context", "fallback"])
def test_decisions_and_the_context_survive_a_resume_without_the_private_context(
    store: Store, hidden: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if hidden:
        monkeypatch.setattr(private, "CONTEXT_ATTRIBUTE", "_context_renamed_by_a_later_sdk")
    sent.clear()
    both = [function_call("refund", {"order": 5}, call_id="c1"), function_call("refund", {"order": 6}, call_id="c2")]
    budget = Budget(model_turns=4, tool_executions=4)
    paused = run_guarded_sync(clerk(both), "refund", budget=budget, store=store, task_id="t1", context={"desk": 7})
    assert (paused.status, paused.reason) == (Status.NEEDS_HUMAN, Reason.APPROVAL)
    model = ScriptedModel([[assistant_message("refunded 5, not 6")]])
    resumed = resume_guarded_sync(
        Agent(name="clerk", model=model, tools=[refund]),
        paused.pause_id or "",
        store=store,
        who="ana",
        decisions={"c1": "approve", "c2": "reject"},
        rejection_message="refund of order 6 refused",
    )
    assert sent == [(5, {"desk": 7})]  # the application's context reached the resumed tool
    assert (resumed.status, resumed.used) == (Status.PARTIAL, Usage(2, 1))
    assert told_by_id(model.last_call.input) == {"c1": "refunded 5", "c2": "refund of order 6 refused"}


def test_the_decisions_read_from_a_states_json_equal_the_sdks_own() -> None:
    paused: list[Any] = []
    outcome = run_guarded_sync(
        clerk([function_call("refund", {"order": n}, call_id=f"c{n}") for n in (1, 2, 3)]),
        "go",
        budget=Budget(model_turns=4, tool_executions=4),
        on_pause=lambda result, guard: paused.append(result),
    )
    assert outcome.status is Status.NEEDS_HUMAN
    state = paused[0].to_state()
    first, second, _third = state.get_interruptions()
    state.approve(first)
    state.reject(second)
    calls = [("refund", "c1"), ("refund", "c2"), ("refund", "c3"), ("other", "c1")]
    sdk = private.tool_decisions(state)
    private_name = private.CONTEXT_ATTRIBUTE
    try:
        private.CONTEXT_ATTRIBUTE = "_context_renamed_by_a_later_sdk"
        from_json = private.tool_decisions(state)
    finally:
        private.CONTEXT_ATTRIBUTE = private_name
    assert [sdk(*c) for c in calls] == [from_json(*c) for c in calls] == [True, False, None, None]


# --- FunctionTool._agent_instance --------------------------------------------------------------------------------


def test_an_agent_tool_that_cannot_be_seen_still_never_sends_an_unbounded_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inner = Agent(name="inner", model=ScriptedModel([[assistant_message("found")]]))
    lead = ScriptedModel([[function_call("ask", {"input": "q"}, call_id="c1")], [assistant_message("done")]])
    outer = Agent(
        name="lead",
        model=lead,
        model_settings=ModelSettings(max_tokens=50),
        tools=[inner.as_tool(tool_name="ask", tool_description="Ask.")],
    )
    budget = Budget(model_turns=5, tool_executions=5, total_tokens=10_000)
    with pytest.raises(ValueError, match=r"agent 'inner'.*max_tokens"):
        run_guarded_sync(outer, "q", budget=budget)  # seen: refused before anything runs
    assert len(lead.calls) == 0
    monkeypatch.setattr(private, "AGENT_ATTRIBUTE", "_agent_renamed_by_a_later_sdk")
    outcome = run_guarded_sync(outer, "q", budget=budget)
    # unseen: the inner agent's request is refused at its reservation, before it is sent; the SDK's failure policy
    # of the agent tool tells the lead a tool error, and the run goes on
    assert (outcome.status, outcome.used.models, len(inner.model.calls)) == (Status.PARTIAL, 2, 0)  # type: ignore[union-attr]
    told = told_by_id(lead.calls[-1].input)["c1"]
    assert told.startswith("An error occurred while running the tool") and "found" not in told
