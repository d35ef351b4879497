"""The raw function-calling loop's doors: the real ``openai`` client over HTTP against the scripted server (Chat
Completions and Responses, sync and async).

The same shop as the Agents SDK's rows: ``lookup`` (a read), ``refund`` (a write, operation ``refund-<order>``,
verified at the receiver); the model looks order 1 up, refunds it, asks for the same refund again, then answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import openai

from agents_loopguard import Outcome, RunOptions
from agents_loopguard.function_calling import (
    GuardedTool,
    RetryPolicy,
    arun_chat_completions,
    arun_responses,
    run_chat_completions,
    run_responses,
)
from agents_loopguard.run import declare_tool
from tests.conformance.kit import Door, Env, Observed
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, function_call, http_error, tool_calls
from tests.support.shop import MODEL
from tests.support.wire import async_http_client, http_client

__all__ = ["DOORS"]

FINAL = "Refunded order 1."
ORDER = {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}


def shop(env: Env, *, lookup_fails: int = 0) -> list[GuardedTool]:
    """``lookup`` (a read; its first ``lookup_fails`` attempts fail without effect) and ``refund`` (a write), whose
    bodies count themselves in ``env``."""
    failures = [ConnectionError("the shop did not answer")] * lookup_fails

    def lookup(order: int) -> str:
        env.body("lookup")
        if failures:
            raise failures.pop()
        return f"order {order}: paid"

    def refund(order: int) -> str:
        env.body("refund", f"refund-{order}")
        return f"refunded {order}"

    def refunded(args: Any, output: Any) -> dict[str, Any]:
        committed = env.committed(f"refund-{args['order']}")
        return {"revision": 2, "done": False, "effect": "committed" if committed else "not_committed"}

    retry = RetryPolicy(max_retries=2, initial_delay=0, jitter=0)
    return [
        GuardedTool(
            "lookup",
            lookup,
            parameters=ORDER,
            verify=lambda a, out: {"revision": 1, "done": False, "effect": "none"},
            retry=retry,
        ),
        GuardedTool(
            "refund",
            refund,
            parameters=ORDER,
            kind="write",
            operation_id=lambda a: f"refund-{a['order']}",
            verify=refunded,
        ),
    ]


def script(*before_refund: Any) -> list[Any]:
    """Look order 1 up, (``before_refund``), refund it, ask for the same refund again, answer."""
    return [
        tool_calls(function_call("lookup", {"order": 1}, "c1")),
        *before_refund,
        tool_calls(function_call("refund", {"order": 1}, "c2")),
        tool_calls(function_call("refund", {"order": 1}, "c3")),
        final_text(FINAL),
    ]


def loop(
    env: Env,
    api: str,
    mode: str,
    steps: Sequence[Any],
    *,
    tools: list[GuardedTool] | None = None,
    client_retries: int = 0,
    **options: Any,
) -> Observed:
    """Run the loop of ``api`` in ``mode`` with a real client (its own retries: ``client_retries``)."""
    tools = shop(env) if tools is None else tools
    kwargs = env.options(**options)
    with ScriptedOpenAIServer(steps) as server:
        env.count_requests(lambda: len(server.requests))
        client_options = {"base_url": server.base_url, "api_key": "test", "max_retries": client_retries}
        if mode == "sync":
            with openai.OpenAI(**client_options, http_client=http_client()) as client:
                if api == "chat":
                    messages = [{"role": "user", "content": "Refund order 1."}]
                    outcome = run_chat_completions(client, model=MODEL, messages=messages, tools=tools, **kwargs)
                else:
                    outcome = run_responses(client, model=MODEL, input="Refund order 1.", tools=tools, **kwargs)
        else:

            async def main() -> Outcome:
                async with openai.AsyncOpenAI(**client_options, http_client=async_http_client()) as client:
                    if api == "chat":
                        messages = [{"role": "user", "content": "Refund order 1."}]
                        return await arun_chat_completions(
                            client, model=MODEL, messages=messages, tools=tools, **kwargs
                        )
                    return await arun_responses(client, model=MODEL, input="Refund order 1.", tools=tools, **kwargs)

            outcome = asyncio.run(main())
    return env.observe(outcome)


def function_tools(api: str, mode: str) -> Callable[[Env], Observed]:
    def build(env: Env) -> Observed:
        return loop(env, api, mode, script())

    return build


def parallel_calls(env: Env) -> Observed:
    """Several function calls in one response: the loop runs them one after the other, each reserved."""
    batch = tool_calls(
        function_call("lookup", {"order": 1}, "c1"),
        function_call("refund", {"order": 1}, "c2"),
        function_call("refund", {"order": 2}, "c3"),
    )
    return loop(env, "responses", "async", [batch, final_text(FINAL)])


def model_retries(env: Env) -> Observed:
    """The loop's own retries of a failed request (``LoopOptions.model_retry``): a 500, then the answer."""
    return loop(env, "chat", "sync", script(http_error(500)), model_retry=RetryPolicy(max_retries=2, initial_delay=0))


def client_retries(env: Env) -> Observed:
    """A client built with its own retries (``max_retries=5``): the loop turns them off and makes its own, each
    HTTP attempt reserved."""
    return loop(
        env,
        "responses",
        "async",
        script(http_error(503), http_error(503)),
        client_retries=5,
        model_retry=RetryPolicy(max_retries=2, initial_delay=0.01),
    )


def tool_retries(env: Env) -> Observed:
    """``GuardedTool(retry=RetryPolicy(...))``: the lookup fails once without effect and is retried."""
    return loop(env, "chat", "async", script(), tools=shop(env, lookup_fails=1))


def unknown_tool(env: Env) -> Observed:
    """The model calls a tool the loop does not offer: ``invalid_call``, read by the model; no body runs."""
    steps = [tool_calls(function_call("delete_everything", {}, "c0")), *script()]
    return loop(env, "responses", "sync", steps, on_refusal="continue")


def refused(call: Callable[[Env], Any]) -> Callable[[Env], Observed]:
    """A door the loop refuses before anything runs: the error's message is what the row observed."""

    def build(env: Env) -> Observed:
        try:
            call(env)
        except (TypeError, ValueError) as exc:
            seen = env.observe(None)
            seen.refused = str(exc)
            return seen
        return env.observe(None)

    return build


def streaming(env: Env) -> Observed:
    return loop(env, "chat", "sync", script(), request_options={"stream": True})


def hosted_tool(env: Env) -> Observed:
    return loop(env, "responses", "sync", script(), tools=[*shop(env), {"type": "web_search"}])  # type: ignore[list-item]


def declared_by_name(env: Env) -> Observed:
    """``GuardedTool``s that declare nothing, the write declared by name (``options=RunOptions(tools={...})``)."""
    lookup, refund = shop(env)
    plain = [GuardedTool(tool.name, tool.fn, parameters=ORDER) for tool in (lookup, refund)]
    declaration = declare_tool("refund", kind="write", operation_id=refund.operation_id, verify=refund.verify)
    return loop(env, "chat", "sync", script(), tools=plain, options=RunOptions(tools={"refund": declaration}))


def declared_twice(env: Env) -> Observed:
    return loop(env, "chat", "sync", script(), options=RunOptions(tools={"refund": declare_tool("refund")}))


def rerun(env: Env) -> Observed:
    """The same task run again after it ended: the stored outcome comes back, no request leaves."""
    loop(env, "chat", "sync", script())
    return loop(env, "chat", "sync", script())


def door(name: str, doc: str, build: Callable[[Env], Observed], **more: Any) -> Door:
    """A row of this file: by default the user gets the shop's final answer (``final=None``: not checked)."""
    return Door("raw", name, doc, build, **{"final": FINAL, **more})


DOORS = [
    door("chat-sync", "`run_chat_completions` with `openai.OpenAI`", function_tools("chat", "sync")),
    door("chat-async", "`arun_chat_completions` with `openai.AsyncOpenAI`", function_tools("chat", "async")),
    door("responses-sync", "`run_responses` with `openai.OpenAI`", function_tools("responses", "sync")),
    door("responses-async", "`arun_responses` with `openai.AsyncOpenAI`", function_tools("responses", "async")),
    door("parallel-calls", "several function calls in one model response", parallel_calls),
    door("model-retries", "the loop's retries of a failed model request (`model_retry=`)", model_retries),
    door("client-retries", "a client built with its own retries (`OpenAI(max_retries=5)`)", client_retries),
    door("tool-retries", "a tool's own retries (`GuardedTool(retry=RetryPolicy(...))`)", tool_retries),
    door("unknown-tool", "a call of a tool the loop does not offer", unknown_tool),
    door(
        "streaming",
        'a streamed request (`request_options={"stream": True}`)',
        refused(streaming),
        mark="refused",
        refusal="streaming is not supported",
    ),
    door(
        "hosted-tool",
        'a hosted tool (`{"type": "web_search"}`) among the tools',
        refused(hosted_tool),
        mark="refused",
        refusal="tools must be GuardedTool instances",
    ),
    door("rerun", "the same task run again after it ended", rerun, stop_reason=None),
    door(
        "declared-by-name",
        "tools declared by name (`options=RunOptions(tools={...})`)",
        declared_by_name,
    ),
    door(
        "declared-twice",
        "a `GuardedTool` that declares itself and, differently, in `RunOptions(tools=...)`",
        refused(declared_twice),
        mark="refused",
        refusal="is declared twice",
    ),
]
