"""End to end over real HTTP: the Agents SDK's OpenAIResponsesModel and OpenAIChatCompletionsModel, the real
``openai`` client (nothing patched), and the scripted OpenAI-compatible server on 127.0.0.1 recording every request.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import agents
import openai
import pytest
from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelRetrySettings,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    retry_policies,
)

from agents_loopguard import Budget, MemoryStore, OperationState, Reason, Status
from agents_loopguard.sdk import guarded_tool, run_guarded
from tests.support.scripted_openai import (
    ScriptedOpenAIServer,
    dynamic,
    final_text,
    function_call,
    http_error,
    stall,
    tool_call,
    tool_calls,
)
from tests.support.sdk import done_at_two, guarded_outcome
from tests.support.wire import scripted_server

pytestmark = pytest.mark.timeout(60)
agents.set_tracing_disabled(True)

MODEL = "gpt-4o-mini"
BUDGET = Budget(model_turns=10, tool_executions=10)
KINDS = ["responses", "chat"]
MODES = [False, True]


server = pytest.fixture(scripted_server, name="server")


def sdk_model(kind: str, client: openai.AsyncOpenAI) -> Any:
    if kind == "chat":
        return OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    return OpenAIResponsesModel(model=MODEL, openai_client=client)


def client_for(server: ScriptedOpenAIServer) -> openai.AsyncOpenAI:
    # max_retries=0: the client's own HTTP retries happen beneath the Model interface, out of the guard's sight;
    # retries belong to ModelSettings(retry=...), where each attempt is reserved.
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


async def guarded(agent: Agent[Any], stream: bool, **kwargs: Any) -> Any:
    kwargs.setdefault("budget", BUDGET)
    return await guarded_outcome(agent, "go", stream=stream, **kwargs)


def choice_sent(body: dict[str, Any]) -> Any:
    return body.get("tool_choice")


checked: list[int] = []


def check_order(order: int) -> str:
    """Check an order."""
    checked.append(order)
    return f"order {order} checked"


@pytest.fixture(autouse=True)
def _clear() -> None:
    checked.clear()


def obeys_tool_choice(order: int) -> Any:
    """A server-side model that calls the tool while tool_choice forces it and answers when it may."""

    def step(body: dict[str, Any]) -> Any:
        if body.get("tool_choice") in (None, "auto", "none"):
            return final_text("All orders are checked.")
        return tool_call("check_order", {"order": order}, call_id=f"call_{order}")

    return dynamic(step)


@pytest.mark.parametrize("kind", KINDS)
def test_plain_sdk_with_forced_tool_choice_loops_to_max_turns_over_http(
    server: ScriptedOpenAIServer, kind: str
) -> None:
    server.add(*[obeys_tool_choice(i) for i in range(1, 6)])

    async def main() -> None:
        async with client_for(server) as client:
            agent = Agent(
                name="clerk",
                model=sdk_model(kind, client),
                tools=[function_tool(check_order)],
                model_settings=ModelSettings(tool_choice="required"),
                reset_tool_choice=False,
            )
            await Runner.run(agent, "check", max_turns=3)

    with pytest.raises(MaxTurnsExceeded):
        asyncio.run(main())
    assert [choice_sent(r.body) for r in server.requests] == ["required"] * 3


@pytest.mark.parametrize("stream", MODES, ids=["run", "run_streamed"])
@pytest.mark.parametrize("kind", KINDS)
def test_guarded_forced_tool_choice_is_released_on_the_wire_and_completes(
    server: ScriptedOpenAIServer, kind: str, stream: bool
) -> None:
    server.add(*[obeys_tool_choice(i) for i in range(1, 6)])

    async def main() -> Any:
        async with client_for(server) as client:
            agent = Agent(
                name="clerk",
                model=sdk_model(kind, client),
                tools=[guarded_tool(verify=done_at_two)(check_order)],
                model_settings=ModelSettings(tool_choice="required"),
                reset_tool_choice=False,
            )
            return await guarded(agent, stream, max_turns=3)

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.reason, outcome.value) == (
        Status.COMPLETED,
        Reason.VALIDATED_DONE,
        "order 2 checked",
    )
    assert outcome.result.final_output == "All orders are checked."
    assert [choice_sent(r.body) for r in server.requests] == ["required", "required", "none"]
    assert all(bool(r.body.get("stream")) is stream for r in server.requests)
    assert outcome.used.models == len(server.requests) == 3 and checked == [1, 2]


@pytest.mark.parametrize("stream", MODES, ids=["run", "run_streamed"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_looping_model_is_stopped_with_what_was_verified(
    server: ScriptedOpenAIServer, kind: str, stream: bool
) -> None:
    server.add(*[tool_call("check_order", {"order": 1}, call_id=f"call_{i}") for i in range(6)])

    async def main() -> Any:
        async with client_for(server) as client:
            agent = Agent(name="clerk", model=sdk_model(kind, client), tools=[guarded_tool(check_order)])
            return await guarded(agent, stream)

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.reason, outcome.value) == (Status.STOPPED, Reason.SAME_CALL, "order 1 checked")
    assert checked == [1, 1] and outcome.used.tools == 2 and len(server.requests) == outcome.used.models == 3


@pytest.mark.parametrize("stream", MODES, ids=["run", "run_streamed"])
@pytest.mark.parametrize("kind", KINDS)
def test_sdk_retries_over_http_are_reserved_attempts(server: ScriptedOpenAIServer, kind: str, stream: bool) -> None:
    server.add(http_error(500), http_error(503), final_text("fine"))
    settings = ModelSettings(
        retry=ModelRetrySettings(
            max_retries=2, backoff={"initial_delay": 0, "jitter": False}, policy=retry_policies.http_status([500, 503])
        )
    )

    async def main() -> Any:
        async with client_for(server) as client:
            return await guarded(Agent(name="a", model=sdk_model(kind, client), model_settings=settings), stream)

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.used.models, len(server.requests)) == (Status.PARTIAL, 3, 3)


@pytest.mark.parametrize("kind", KINDS)
def test_the_model_budget_stops_retries_before_the_request_leaves(server: ScriptedOpenAIServer, kind: str) -> None:
    server.add(http_error(500), http_error(500), http_error(500), final_text("fine"))
    settings = ModelSettings(
        retry=ModelRetrySettings(max_retries=3, backoff={"initial_delay": 0}, policy=retry_policies.http_status([500]))
    )

    async def main() -> Any:
        async with client_for(server) as client:
            agent = Agent(name="a", model=sdk_model(kind, client), model_settings=settings)
            return await guarded(agent, False, budget=Budget(model_turns=2, tool_executions=0))

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.reason, outcome.used.models, len(server.requests)) == (
        Status.STOPPED,
        Reason.MODEL_BUDGET,
        2,
        2,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_an_http_error_the_sdk_does_not_retry_is_model_error(server: ScriptedOpenAIServer, kind: str) -> None:
    server.add(http_error(500))

    async def main() -> Any:
        async with client_for(server) as client:
            return await guarded(Agent(name="a", model=sdk_model(kind, client)), False)

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.reason, outcome.used.models) == (Status.STOPPED, Reason.MODEL_ERROR, 1)
    assert "bounded_retry" in outcome.record().allowed_next_actions


@pytest.mark.parametrize("stream", MODES, ids=["run", "run_streamed"])
@pytest.mark.parametrize("kind", KINDS)
def test_parallel_calls_and_a_committed_write_over_http(server: ScriptedOpenAIServer, kind: str, stream: bool) -> None:
    paid: list[int] = []

    @guarded_tool(
        kind="write",
        operation_id=lambda a: f"pay-{a['order']}",
        verify=lambda a, out: {"revision": len(paid), "done": False, "effect": "committed"},  # payments on record
    )
    async def pay(order: int) -> str:
        """Pay an order."""
        paid.append(order)
        return f"receipt {order}"

    batch = tool_calls(
        function_call("pay", {"order": 1}, call_id="call_a"),
        function_call("pay", {"order": 2}, call_id="call_b"),
        function_call("pay", {"order": 1}, call_id="call_c"),  # the same business operation, in the same batch
    )
    server.add(batch, tool_call("pay", {"order": 2}, call_id="call_d"), final_text("paid"))
    store = MemoryStore()

    async def main() -> Any:
        async with client_for(server) as client:
            return await guarded(Agent(name="a", model=sdk_model(kind, client), tools=[pay]), stream, store=store)

    outcome = asyncio.run(main())
    assert sorted(paid) == [1, 2] and outcome.used.tools == 2  # each operation ran once; the repeats were replays
    assert {r.operation_id: r.state for r in store.operations()} == {
        "pay-1": OperationState.COMMITTED,
        "pay-2": OperationState.COMMITTED,
    }
    assert outcome.status is Status.PARTIAL and len(server.requests) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_cancelling_an_http_run_records_the_call_in_flight(server: ScriptedOpenAIServer, kind: str) -> None:
    started: list[asyncio.Event] = []

    @guarded_tool
    async def crawl(url: str) -> str:
        """Crawl a page."""
        started[0].set()
        await asyncio.sleep(30)
        return "never"

    server.add(tool_call("crawl", {"url": "u"}, call_id="call_crawl"), stall(30))

    async def main() -> Any:
        started.append(asyncio.Event())
        async with client_for(server) as client:
            agent = Agent(name="a", model=sdk_model(kind, client), tools=[crawl])
            task = asyncio.create_task(run_guarded(agent, "go", budget=BUDGET))
            await started[0].wait()
            task.cancel()
            return await task

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.reason, outcome.in_flight) == (
        Status.STOPPED,
        Reason.CANCELLED,
        ("crawl[call_crawl]",),
    )
    assert len(server.requests) == 1


@pytest.mark.parametrize("stream", MODES, ids=["run", "run_streamed"])
@pytest.mark.parametrize("kind", KINDS)
def test_r2_a_client_with_its_own_retries_has_every_http_attempt_reserved(
    server: ScriptedOpenAIServer, kind: str, stream: bool
) -> None:
    """The openai client retries twice by default, inside one model call: the guard takes those retries over, so
    the server's request count equals ``used.models`` without the user changing the client."""
    server.add(http_error(500), http_error(503), final_text("fine"))

    async def main() -> Any:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=2) as client:
            return await guarded(Agent(name="a", model=sdk_model(kind, client)), stream)

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.used.models, len(server.requests)) == (Status.PARTIAL, 3, 3)
    assert outcome.final_output == "fine"


def test_r2_a_default_async_openai_counts_every_attempt_and_the_budget_stops_its_retries(
    server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model named by string uses the SDK's default provider and a default ``AsyncOpenAI()`` (from the
    environment): its third attempt would exceed the model budget, so it is never sent."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    server.add(http_error(500), http_error(500), final_text("too late"))
    outcome = asyncio.run(guarded(Agent(name="a", model=MODEL), False, budget=Budget(model_turns=2, tool_executions=0)))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_BUDGET)
    assert outcome.used.models == len(server.requests) == 2


def test_r2_a_model_request_is_bounded_by_the_deadline(server: ScriptedOpenAIServer) -> None:
    """A stalled server cannot hold the run past ``Budget.deadline``: the request is abandoned at the deadline."""
    server.add(stall(30))

    async def main() -> Any:
        async with client_for(server) as client:
            deadline = time.time() + 1.0
            return await guarded(
                Agent(name="a", model=sdk_model("responses", client)),
                False,
                budget=Budget(model_turns=3, tool_executions=0, deadline=deadline),
            )

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.DEADLINE)
    assert outcome.used.models == 1 == len(server.requests)
