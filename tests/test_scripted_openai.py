"""Tests of the scripted OpenAI server against the real openai client and Agents SDK, over HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import agents
import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import Response

from tests.support.scripted_openai import (
    ScriptedOpenAIServer,
    Usage,
    dynamic,
    final_text,
    function_call,
    http_error,
    raw,
    stall,
    tool_call,
    tool_calls,
)
from tests.support.wire import scripted_server

pytestmark = pytest.mark.timeout(30)

MODEL = "gpt-4o-mini"
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
CHAT_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
RESPONSES_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    agents.set_tracing_disabled(True)


server = pytest.fixture(scripted_server, name="server")


def sync_client(srv: ScriptedOpenAIServer, **kwargs: Any) -> openai.OpenAI:
    # Strict validation makes the client's pydantic models reject any malformed field.
    return openai.OpenAI(base_url=srv.base_url, api_key="test", _strict_response_validation=True, **kwargs)


def async_client(srv: ScriptedOpenAIServer, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", _strict_response_validation=True, **kwargs)


# --------------------------------------------------------------------------- chat completions


def test_chat_tool_call_then_final_answer_sync(server: ScriptedOpenAIServer) -> None:
    server.add(
        tool_call("get_weather", {"city": "Paris"}, call_id="call_abc", usage=Usage(7, 3)),
        final_text("Sunny in Paris."),
    )
    with sync_client(server) as client:
        first = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=CHAT_TOOLS, tool_choice="required")
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.tool_calls is not None
        (call,) = choice.message.tool_calls
        assert call.type == "function"
        assert (call.id, call.function.name) == ("call_abc", "get_weather")
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        assert first.usage is not None
        assert (first.usage.prompt_tokens, first.usage.completion_tokens, first.usage.total_tokens) == (
            7,
            3,
            10,
        )
        assert first.model == MODEL

        second = client.chat.completions.create(model=MODEL, messages=MESSAGES, tool_choice="auto")
        assert second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.content == "Sunny in Paris."
        assert second.choices[0].message.tool_calls is None
        assert second.usage is not None and second.usage.prompt_tokens == 10  # server default

    paths = [r.path for r in server.requests]
    assert paths == ["/v1/chat/completions"] * 2
    assert [r.body["tool_choice"] for r in server.requests] == ["required", "auto"]
    assert server.requests[0].headers["authorization"] == "Bearer test"
    assert server.remaining == 0


def test_chat_tool_call_then_final_answer_async(server: ScriptedOpenAIServer) -> None:
    server.add(
        tool_calls(function_call("get_weather", {"city": "Paris"}), function_call("get_weather", '{"city":"Oslo"}')),
        final_text("Both sunny."),
    )

    async def main() -> tuple[Any, Any]:
        async with async_client(server) as client:
            first = await client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=CHAT_TOOLS)
            second = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
            return first, second

    first, second = asyncio.run(main())
    calls = first.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments)["city"] for c in calls] == ["Paris", "Oslo"]
    assert len({c.id for c in calls}) == 2  # generated call ids are distinct
    assert second.choices[0].message.content == "Both sunny."
    assert len(server.requests) == 2


# --------------------------------------------------------------------------- responses


def test_responses_tool_call_then_final_answer_sync(server: ScriptedOpenAIServer) -> None:
    server.add(
        tool_call("get_weather", {"city": "Paris"}, call_id="call_w1", usage=Usage(input_tokens=12, output_tokens=4)),
        final_text("Sunny in Paris."),
    )
    with sync_client(server) as client:
        first = client.responses.create(
            model=MODEL, input="Weather in Paris?", tools=RESPONSES_TOOLS, tool_choice="required"
        )
        assert first.status == "completed"
        (item,) = first.output
        assert item.type == "function_call"
        assert (item.call_id, item.name, item.status) == ("call_w1", "get_weather", "completed")
        assert item.id
        assert json.loads(item.arguments) == {"city": "Paris"}
        assert first.tool_choice == "required"  # echoed from the request, like the real API
        assert [t.name for t in first.tools if t.type == "function"] == ["get_weather"]
        assert first.usage is not None
        assert (first.usage.input_tokens, first.usage.output_tokens, first.usage.total_tokens) == (12, 4, 16)

        second = client.responses.create(
            model=MODEL,
            input=[
                {"role": "user", "content": "Weather in Paris?"},
                {"type": "function_call", "call_id": "call_w1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_w1", "output": "sunny"},
            ],
        )
        assert second.output_text == "Sunny in Paris."
        assert second.output[0].type == "message"
        assert second.id != first.id

    assert [r.path for r in server.requests] == ["/v1/responses"] * 2
    assert server.requests[0].body["tool_choice"] == "required"
    assert server.requests[1].body["input"][2]["output"] == "sunny"


def test_responses_tool_call_then_final_answer_async(server: ScriptedOpenAIServer) -> None:
    server.add(tool_call("get_weather", {"city": "Oslo"}), final_text("Rainy."))

    async def main() -> tuple[Response, Response]:
        async with async_client(server) as client:
            first = await client.responses.create(model=MODEL, input="hi", tools=RESPONSES_TOOLS)
            second = await client.responses.create(model=MODEL, input="hi")
            return first, second

    first, second = asyncio.run(main())
    assert first.output[0].type == "function_call"
    assert json.loads(first.output[0].arguments) == {"city": "Oslo"}
    assert second.output_text == "Rainy."


# --------------------------------------------------------------------------- errors and retries


@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_client_retries_a_500_then_succeeds(server: ScriptedOpenAIServer, endpoint: str) -> None:
    server.add(http_error(500, retry_after_ms=1), final_text("recovered"))
    with sync_client(server, max_retries=2) as client:
        if endpoint == "chat":
            text = client.chat.completions.create(model=MODEL, messages=MESSAGES).choices[0].message.content
        else:
            text = client.responses.create(model=MODEL, input="hi").output_text
    assert text == "recovered"
    assert len(server.requests) == 2
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]
    assert server.requests[0].body == server.requests[1].body


def test_client_gives_up_after_max_retries(server: ScriptedOpenAIServer) -> None:
    server.add(*[http_error(500, "boom", retry_after_ms=1) for _ in range(3)], final_text("never sent"))
    with sync_client(server, max_retries=2) as client, pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert info.value.status_code == 500
    assert "boom" in info.value.message
    assert len(server.requests) == 3
    assert server.remaining == 1


def test_status_errors_map_to_client_exceptions(server: ScriptedOpenAIServer) -> None:
    server.add(
        http_error(401),
        http_error(429, headers={"retry-after-ms": "1"}),
        http_error(429, retry_after_ms=1),
        final_text("after rate limit"),
    )
    with sync_client(server, max_retries=1) as client:
        with pytest.raises(openai.AuthenticationError) as auth:
            client.responses.create(model=MODEL, input="hi")
        assert auth.value.code == "invalid_api_key"
        assert len(server.requests) == 1  # 401 is not retried

        with pytest.raises(openai.RateLimitError) as limited:
            client.responses.create(model=MODEL, input="hi")
        assert limited.value.code == "rate_limit_exceeded"
        assert len(server.requests) == 3  # one retry of the 429, answered with another 429

    with sync_client(server, max_retries=0) as client:
        assert client.responses.create(model=MODEL, input="hi").output_text == "after rate limit"


def test_exhausted_script_fails_fast_without_client_retries(server: ScriptedOpenAIServer) -> None:
    with sync_client(server, max_retries=2) as client, pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert "script exhausted" in info.value.message
    assert info.value.code == "script_exhausted"
    assert len(server.requests) == 1  # x-should-retry: false stops the client's retries


def test_unknown_route_is_404_and_consumes_no_step(server: ScriptedOpenAIServer) -> None:
    server.add(final_text("still here"))
    with sync_client(server, max_retries=0) as client:
        with pytest.raises(openai.NotFoundError):
            client.models.list()
        assert client.responses.create(model=MODEL, input="hi").output_text == "still here"
    assert [r.path for r in server.requests] == ["/v1/models", "/v1/responses"]


def test_stall_longer_than_timeout_raises_api_timeout(server: ScriptedOpenAIServer) -> None:
    server.add(stall(60), final_text("next"))
    with sync_client(server, max_retries=0, timeout=0.5) as client:
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
        # The stalled step was consumed; the server keeps serving the rest of the script.
        assert client.chat.completions.create(model=MODEL, messages=MESSAGES).choices[0].message.content == "next"
    assert len(server.requests) == 2


def test_client_retries_timeouts_too(server: ScriptedOpenAIServer) -> None:
    server.add(stall(60), final_text("second time lucky"))
    with sync_client(server, max_retries=1, timeout=0.3) as client:
        # The openai client also retries timeouts, so a stall is not always an error.
        got = client.responses.create(model=MODEL, input="hi")
    assert got.output_text == "second time lucky"
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]


def test_shorter_stall_answers_with_its_then_step(server: ScriptedOpenAIServer) -> None:
    server.add(stall(0.05, then=tool_call("get_weather", {"city": "Rome"})))
    with sync_client(server, max_retries=0, timeout=10) as client:
        got = client.responses.create(model=MODEL, input="hi")
    assert got.output[0].type == "function_call"
    assert got.output[0].name == "get_weather"


def test_stop_interrupts_a_stalled_handler() -> None:
    before = set(threading.enumerate())
    with ScriptedOpenAIServer([stall(120)]) as srv, sync_client(srv, max_retries=0, timeout=0.3) as client:
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert len(srv.requests) == 1
    # stop() woke the sleeping handler and joined every thread it started.
    leftovers = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leftovers == []


# --------------------------------------------------------------------------- dynamic and raw steps


def test_dynamic_step_sees_the_request(server: ScriptedOpenAIServer) -> None:
    def decide(body: dict[str, Any]) -> Any:
        if body.get("tool_choice") == "required":
            return tool_call("get_weather", {"city": "Paris"})
        return final_text(f"tool_choice was {body.get('tool_choice')}")

    server.add(dynamic(decide), decide)  # a bare callable works too
    with sync_client(server) as client:
        first = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=CHAT_TOOLS, tool_choice="required")
        second = client.chat.completions.create(model=MODEL, messages=MESSAGES, tool_choice="none")
    assert first.choices[0].message.tool_calls is not None
    assert second.choices[0].message.content == "tool_choice was none"


def test_dynamic_step_errors_are_reported(server: ScriptedOpenAIServer) -> None:
    def broken(body: dict[str, Any]) -> Any:
        raise ValueError("bad script")

    server.add(broken)
    with sync_client(server, max_retries=2) as client, pytest.raises(openai.InternalServerError) as info:
        client.responses.create(model=MODEL, input="hi")
    assert "bad script" in info.value.message
    assert [type(e) for e in server.errors] == [ValueError]
    assert len(server.requests) == 1


def test_raw_step_is_sent_verbatim(server: ScriptedOpenAIServer) -> None:
    server.add(raw({"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": []}))
    with openai.OpenAI(base_url=server.base_url, api_key="test") as client:
        got = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert got.choices == []
    assert got.model == "m"


# --------------------------------------------------------------------------- streaming


def test_chat_streaming_tool_call_and_text(server: ScriptedOpenAIServer) -> None:
    args = json.dumps({"city": "Paris", "unit": "celsius", "detail": "a long enough value to be split"})
    server.add(
        tool_call("get_weather", args, call_id="call_s1", usage=Usage(3, 2)),
        final_text("It is sunny today."),
        final_text("no usage"),
    )
    with sync_client(server) as client:
        chunks = list(
            client.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                tools=CHAT_TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
        deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert deltas[0].id == "call_s1"
        assert deltas[0].function is not None and deltas[0].function.name == "get_weather"
        assert "".join(d.function.arguments or "" for d in deltas if d.function) == args
        assert len(deltas) > 2  # the arguments really arrive in pieces
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finish == ["tool_calls"]
        assert chunks[-1].choices == []
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 5

        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "It is sunny today."
        assert chunks[0].choices[0].delta.role == "assistant"

        # Like the real API: no usage chunk unless the request asks for it.
        chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
        assert all(c.usage is None for c in chunks)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "no usage"


def test_chat_streaming_async_with_always_stream_usage() -> None:
    async def main(srv: ScriptedOpenAIServer) -> list[ChatCompletionChunk]:
        async with async_client(srv) as client:
            stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
            return [chunk async for chunk in stream]

    with ScriptedOpenAIServer([final_text("hello async")], always_stream_usage=True) as srv:
        chunks = asyncio.run(main(srv))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hello async"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 10


def test_responses_streaming_raw_events(server: ScriptedOpenAIServer) -> None:
    server.add(tool_calls(function_call("get_weather", {"city": "Paris"}), text="Let me check."))
    with sync_client(server) as client:
        events = list(client.responses.create(model=MODEL, input="hi", tools=RESPONSES_TOOLS, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    for expected in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ):
        assert expected in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Let me check."
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris"}
    completed = events[-1]
    assert completed.type == "response.completed"
    assert [item.type for item in completed.response.output] == ["message", "function_call"]
    assert completed.response.usage is not None and completed.response.usage.output_tokens == 5
    assert events[0].type == "response.created" and events[0].response.status == "in_progress"
    assert server.requests[0].body["stream"] is True


def test_responses_stream_helper_accumulates(server: ScriptedOpenAIServer) -> None:
    # The client's `responses.stream()` helper checks item identities strictly across events.
    server.add(final_text("Streaming via helper works."))
    with sync_client(server) as client, client.responses.stream(model=MODEL, input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Streaming via helper works."
    assert final.output_text == "Streaming via helper works."


def test_responses_streaming_async(server: ScriptedOpenAIServer) -> None:
    server.add(tool_call("get_weather", {"city": "Lima"}))

    async def main() -> list[Any]:
        async with async_client(server) as client:
            stream = await client.responses.create(model=MODEL, input="hi", stream=True)
            return [event async for event in stream]

    events = asyncio.run(main())
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.type, i.name) for i in done] == [("function_call", "get_weather")]


# --------------------------------------------------------------------------- Agents SDK end to end


def _make_agent(kind: str, client: openai.AsyncOpenAI, seen: list[tuple[int, int]]) -> Agent[Any]:
    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        seen.append((a, b))
        return a + b

    model: Any
    if kind == "chat":
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    else:
        model = OpenAIResponsesModel(model=MODEL, openai_client=client)
    return Agent(name="calc", instructions="Use the add tool.", tools=[add], model=model)


def _tool_output_sent(kind: str, body: dict[str, Any]) -> Any:
    if kind == "chat":
        return next(m["content"] for m in body["messages"] if m["role"] == "tool")
    return next(i["output"] for i in body["input"] if i.get("type") == "function_call_output")


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_agents_sdk_end_to_end(server: ScriptedOpenAIServer, kind: str, streamed: bool) -> None:
    server.add(tool_call("add", {"a": 2, "b": 3}, call_id="call_add"), final_text("The sum is 5."))
    seen: list[tuple[int, int]] = []

    async def main() -> tuple[Any, list[Any]]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test") as client:
            agent = _make_agent(kind, client, seen)
            if not streamed:
                return await Runner.run(agent, "What is 2 + 3?"), []
            result = Runner.run_streamed(agent, "What is 2 + 3?")
            events = [event async for event in result.stream_events()]
            return result, events

    result, events = asyncio.run(main())
    assert seen == [(2, 3)]
    assert result.final_output == "The sum is 5."
    assert len(server.requests) == 2
    assert server.requests[0].path == ("/v1/chat/completions" if kind == "chat" else "/v1/responses")
    assert all(bool(r.body.get("stream")) is streamed for r in server.requests)
    assert str(_tool_output_sent(kind, server.requests[1].body)) == "5"
    assert result.context_wrapper.usage.requests == 2
    if kind == "chat" and streamed:
        # Chat Completions streams carry usage only when asked, and the SDK asks
        # (stream_options.include_usage) only for api.openai.com.
        assert "stream_options" not in server.requests[0].body
        assert result.context_wrapper.usage.input_tokens == 0
    else:
        assert result.context_wrapper.usage.input_tokens == 20
    if streamed:
        names = [e.name for e in events if e.type == "run_item_stream_event"]
        assert "tool_called" in names and "tool_output" in names
        assert any(e.type == "raw_response_event" for e in events)


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_agents_sdk_leaves_first_attempt_retries_to_the_client(server: ScriptedOpenAIServer, kind: str) -> None:
    server.add(http_error(503, retry_after_ms=1), tool_call("add", {"a": 1, "b": 1}), final_text("2"))
    seen: list[tuple[int, int]] = []

    async def main() -> Any:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=2) as client:
            return await Runner.run(_make_agent(kind, client, seen), "1 + 1?")

    result = asyncio.run(main())
    assert result.final_output == "2"
    assert seen == [(1, 1)]
    assert len(server.requests) == 3
    assert server.requests[1].headers["x-stainless-retry-count"] == "1"
