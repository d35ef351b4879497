"""The four entry points of raw function calling (Chat Completions and Responses, sync and async) and their
drivers: the only code here that touches the ``openai`` client.

The client is used with ``max_retries=0`` (``client.with_options``): the loop owns the retries, so every HTTP
request that leaves the process is one reserved model turn.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import openai
from typing_extensions import Unpack

from ..run import Execute, GuardedRun, RunOptions, adrive, drive, perform_check, perform_check_async, within_deadline
from ..run.requests import Send
from ..values.outcome import Outcome
from .loop import Loop, conversation_of, in_flight_label
from .options import LoopFields, LoopOptions
from .tools import GuardedTool
from .wire import Api, Chat, Responses

__all__ = ["arun_chat_completions", "arun_responses", "run_chat_completions", "run_responses"]

_GUARDED_KEYS = frozenset(
    {"model", "messages", "input", "tools", "tool_choice", "stream", "max_tokens", "max_completion_tokens"}
    | {"max_output_tokens"}
)


def _tools(tools: Sequence[GuardedTool], *, asynchronous: bool) -> dict[str, GuardedTool]:
    by_name: dict[str, GuardedTool] = {}
    for tool in tools:
        if not isinstance(tool, GuardedTool):
            raise TypeError(f"tools must be GuardedTool instances, got {type(tool).__name__}")
        if tool.name in by_name:
            raise ValueError(f"two tools are named {tool.name!r}")
        if not asynchronous and any(inspect.iscoroutinefunction(f) for f in (tool.fn, tool.verify)):
            raise TypeError(f"tool {tool.name!r} is async: use the async loop (arun_...) with openai.AsyncOpenAI")
        by_name[tool.name] = tool
    return by_name


def _prepare(
    api: Api,
    *,
    asynchronous: bool,
    model: str,
    conversation: Any,
    tools: Sequence[GuardedTool],
    options: RunOptions | None,
    fields: Mapping[str, Any],
    extra_request: Mapping[str, Any] | None = None,
) -> Loop:
    opts = LoopOptions.merge(options, fields)
    by_name = _tools(tools, asynchronous=asynchronous)
    request_options = {**(extra_request or {}), **(opts.request_options or {})}
    clash = sorted(_GUARDED_KEYS & set(request_options))
    if clash:
        raise ValueError(f"request_options may not set {clash}: the loop sets them (streaming is not supported)")
    if opts.max_output_tokens is not None and (isinstance(opts.max_output_tokens, bool) or opts.max_output_tokens < 1):
        raise ValueError(f"max_output_tokens must be a positive int, got {opts.max_output_tokens!r}")
    run = GuardedRun.start(
        opts, reset_forced_function=opts.reset_forced_function, unwrap_values=False, label=in_flight_label
    )
    run.check_enforceable(model, opts.max_output_tokens)
    specs = {name: run.declaration(name, tool.spec) for name, tool in by_name.items()}  # a conflict: refused now
    return Loop(
        api,
        run,
        model=model,
        conversation=conversation_of(conversation),
        tools=by_name,
        specs=specs,
        options=opts,
        request_options=request_options,
    )


def _bounded(client: Any, send: Send) -> dict[str, Any]:
    """The request's keyword arguments, with ``timeout = min(the client's timeout, the time left before the
    deadline)``: a stalled server cannot hold a worker past ``Budget.deadline``."""
    kwargs: dict[str, Any] = send.request
    if send.timeout is None:
        return kwargs
    own = kwargs.get("timeout", getattr(client, "timeout", None))
    timeout = min(own, send.timeout) if isinstance(own, (int, float)) else send.timeout
    return {**kwargs, "timeout": max(timeout, 0.001)}


def _sync_performer(client: Any, loop: Loop) -> Callable[[Any], Any]:
    create = loop.api.endpoint(client.with_options(max_retries=0))  # the loop owns retries: one request, one turn

    def perform(effect: Any) -> Any:
        if isinstance(effect, Send):
            return create(**_bounded(client, effect))
        if isinstance(effect, Execute):
            return loop.tools[effect.call.tool].fn(**effect.call.args)
        return perform_check(effect)

    return perform


def _async_performer(client: Any, loop: Loop) -> Callable[[Any], Awaitable[Any]]:
    create = loop.api.endpoint(client.with_options(max_retries=0))

    async def perform(effect: Any) -> Any:
        if isinstance(effect, Send):
            return await create(**_bounded(client, effect))
        if isinstance(effect, Execute):
            value = loop.tools[effect.call.tool].fn(**effect.call.args)
            return await within_deadline(value, effect.timeout) if inspect.isawaitable(value) else value
        return await perform_check_async(effect)

    return perform


def run_chat_completions(
    client: openai.OpenAI,
    *,
    model: str,
    messages: Sequence[Any],
    tools: Sequence[GuardedTool],
    options: RunOptions | None = None,
    **fields: Unpack[LoopFields],
) -> Outcome:
    """Run a guarded Chat Completions tool loop to one :class:`~agents_loopguard.values.outcome.Outcome`.

    The options (:class:`~agents_loopguard.function_calling.LoopOptions`) come as one ``options=`` object, as
    keyword arguments, or both (the keywords win): the task's limits from ``guard=`` or from ``budget=`` (with
    ``store=``, ``task_id=``, ``policy=``), the ``tool_choice``, the refusal mode, the price table... After the
    application validates done, the model is asked once more, with a forcing ``tool_choice`` released, for its
    final answer (``final_answer=False`` skips it); ``Outcome.result`` is a :class:`LoopResult`.

    >>> from agents_loopguard import Budget
    >>> from agents_loopguard.function_calling.scripted import calls, says, scripted_client
    >>> orders = {}
    >>> confirm = GuardedTool("confirm_order", lambda order_id: orders.setdefault(order_id, "confirmed"),
    ...     parameters={"type": "object", "properties": {"order_id": {"type": "integer"}}},
    ...     kind="write", operation_id=lambda args: f"confirm-order-{args['order_id']}",
    ...     verify=lambda args, out: {"revision": 1, "done": orders.get(args["order_id"]) == "confirmed",
    ...                               "effect": "committed" if args["order_id"] in orders else "not_committed"})
    >>> client, requests = scripted_client(calls("confirm_order", {"order_id": 42}), says("Confirmed."))
    >>> outcome = run_chat_completions(client, model="gpt-4o-mini", tools=[confirm], tool_choice="required",
    ...     messages=[{"role": "user", "content": "Confirm order 42"}],
    ...     budget=Budget(model_turns=4, tool_executions=2))
    >>> outcome.status, outcome.reason, outcome.result.final_text, [r["tool_choice"] for r in requests]
    (<Status.COMPLETED: 'completed'>, <Reason.VALIDATED_DONE: 'validated_done'>, 'Confirmed.', ['required', 'none'])
    """
    loop = _prepare(
        Chat, asynchronous=False, model=model, conversation=messages, tools=tools, options=options, fields=fields
    )
    return drive(loop.steps(), _sync_performer(client, loop))


async def arun_chat_completions(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    messages: Sequence[Any],
    tools: Sequence[GuardedTool],
    options: RunOptions | None = None,
    **fields: Unpack[LoopFields],
) -> Outcome:
    """:func:`run_chat_completions` with ``openai.AsyncOpenAI``; tools and ``verify`` may be coroutine functions.

    Cancelling the task records the outcome first (``stopped/cancelled``, or ``needs_reconciliation`` for a
    write in flight, whose call id is in ``Outcome.in_flight``), then lets ``CancelledError`` propagate.

    >>> import asyncio
    >>> from agents_loopguard import Budget
    >>> from agents_loopguard.function_calling.scripted import says, scripted_client
    >>> async def main():
    ...     client, _ = scripted_client(says("Hello."), asynchronous=True)
    ...     async with client:
    ...         return await arun_chat_completions(client, model="gpt-4o-mini", tools=[],
    ...             messages=[{"role": "user", "content": "hi"}], budget=Budget(model_turns=1, tool_executions=0))
    >>> outcome = asyncio.run(main())
    >>> outcome.status, outcome.reason, outcome.result.final_text
    (<Status.PARTIAL: 'partial'>, <Reason.UNVERIFIED_FINAL: 'unverified_final'>, 'Hello.')
    """
    loop = _prepare(
        Chat, asynchronous=True, model=model, conversation=messages, tools=tools, options=options, fields=fields
    )
    return await adrive(loop.steps(), _async_performer(client, loop))


def run_responses(
    client: openai.OpenAI,
    *,
    model: str,
    input: str | Sequence[Any],
    tools: Sequence[GuardedTool],
    instructions: str | None = None,
    options: RunOptions | None = None,
    **fields: Unpack[LoopFields],
) -> Outcome:
    """Run a guarded Responses API tool loop (``function_call`` items) to one Outcome.

    Same rules as :func:`run_chat_completions`. The whole input is sent on every request (output items and
    ``function_call_output`` items appended), so nothing depends on server-side conversation state.

    >>> from agents_loopguard import Budget
    >>> from agents_loopguard.function_calling.scripted import calls, says, scripted_client
    >>> lookup = GuardedTool("lookup_order", lambda order_id: {"order_id": order_id, "status": "shipped"},
    ...     parameters={"type": "object", "properties": {"order_id": {"type": "integer"}}},
    ...     verify=lambda args, out: {"revision": 1, "done": out["status"] == "shipped", "effect": "none"})
    >>> client, _ = scripted_client(calls("lookup_order", {"order_id": 7}), says("Shipped."))
    >>> outcome = run_responses(client, model="gpt-4o-mini", input="Where is order 7?", tools=[lookup],
    ...     budget=Budget(model_turns=3, tool_executions=1))
    >>> outcome.reason, outcome.value["output"]["status"], outcome.used.models, outcome.used.tools
    (<Reason.VALIDATED_DONE: 'validated_done'>, 'shipped', 2, 1)
    """
    loop = _prepare(
        Responses,
        asynchronous=False,
        model=model,
        conversation=input,
        tools=tools,
        options=options,
        fields=fields,
        extra_request={"instructions": instructions} if instructions is not None else None,
    )
    return drive(loop.steps(), _sync_performer(client, loop))


async def arun_responses(
    client: openai.AsyncOpenAI,
    *,
    model: str,
    input: str | Sequence[Any],
    tools: Sequence[GuardedTool],
    instructions: str | None = None,
    options: RunOptions | None = None,
    **fields: Unpack[LoopFields],
) -> Outcome:
    """:func:`run_responses` with ``openai.AsyncOpenAI``; tools and ``verify`` may be coroutine functions.

    >>> import asyncio
    >>> from agents_loopguard import Budget
    >>> from agents_loopguard.function_calling.scripted import scripted_client
    >>> async def main():
    ...     client, requests = scripted_client(401, asynchronous=True)
    ...     async with client:
    ...         outcome = await arun_responses(client, model="gpt-4o-mini", input="hi", tools=[],
    ...             budget=Budget(model_turns=5, tool_executions=0))
    ...     return outcome, len(requests)
    >>> outcome, attempts = asyncio.run(main())
    >>> outcome.status, outcome.reason, attempts, outcome.used.models
    (<Status.NEEDS_HUMAN: 'needs_human'>, <Reason.PERMISSION: 'permission'>, 1, 1)
    """
    loop = _prepare(
        Responses,
        asynchronous=True,
        model=model,
        conversation=input,
        tools=tools,
        options=options,
        fields=fields,
        extra_request={"instructions": instructions} if instructions is not None else None,
    )
    return await adrive(loop.steps(), _async_performer(client, loop))
