"""One ADK tool call under the guard: proposed, reserved, run, verified and settled on the invocation's guarded run.

Two places take the reservation, both as close to the body as ADK lets anything be:

* a :func:`~agents_loopguard.adk.guarded_tool` reserves inside its own ``run_async`` (:func:`run_call`), after
  every callback and ADK's confirmation gate, with the arguments the body gets (an agent's ``before_tool_callback``
  that rewrites them is seen), and settles right after the body;
* any other tool (a plain function, a ``FunctionTool`` made elsewhere, ``AgentTool``, a toolset's tools) is
  reserved in the plugin's ``before_tool_callback`` (:func:`begin_call`) and settled in its
  ``after_tool_callback`` / ``on_tool_error_callback`` (:func:`settle_call`): ADK offers no later point.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from ..run import Answer, Executed, ToolSpec
from .invocation import ACTIVE, Invocation, advance, call_key, end_invocation, throw

__all__ = ["active", "answer", "as_result", "begin_call", "cancel_call", "run_call", "settle_call"]

Check = Callable[[Mapping[str, Any]], "str | None"] | None
Body = Callable[[], Awaitable[Any]]


def active(context: ToolContext) -> Invocation | None:
    """The guarded invocation a tool runs in (``None`` outside the plugin: the tool runs as ADK's own)."""
    state = ACTIVE.get()
    if state is None or state.ended:
        return None
    return state


async def begin_call(
    state: Invocation, tool: BaseTool, spec: ToolSpec, args: dict[str, Any], context: ToolContext, check: Check
) -> dict[str, Any] | None:
    """Propose and reserve the call before ADK runs ``tool``: ``None`` when it may run (its steps wait in the
    invocation for :func:`settle_call`), else what the model reads instead (a refusal, a committed write's
    stored result)."""
    run = state.run
    call = run.propose(spec, tool.name, args, context.function_call_id, check=check)
    if isinstance(call, Executed):
        return answer(state, context, call)
    steps = run.execute(spec, call)
    effect = await advance(steps, None)
    if isinstance(effect, Executed):
        return answer(state, context, effect)
    state.calls[call_key(context)] = (spec, steps)
    return None


async def settle_call(
    state: Invocation, tool: BaseTool, args: dict[str, Any], context: ToolContext, reply: Answer
) -> dict[str, Any] | None:
    """Verify and settle a call :func:`begin_call` reserved, with what ADK's run of the tool gave (``None``: the
    tool's result stands; a retry the tool's policy allows runs it again, reserved)."""
    entry = state.calls.pop(call_key(context), None)
    if entry is None:
        return None  # not a call the plugin reserved (a refusal it answered, the confirmation gate, a guarded tool)
    _spec, steps = entry
    executed = await advance(steps, reply, rerun=lambda: tool.run_async(args=args, tool_context=context))
    assert isinstance(executed, Executed), "a settled call is executed"
    if executed.message is not None or executed.verdict is not None or reply.error is not None:
        return answer(state, context, executed)
    return None if executed.output is reply.value else as_result(executed.output)


def cancel_call(state: Invocation, context: ToolContext, error: BaseException) -> None:
    """A reserved call whose run was cancelled: recorded in flight."""
    entry = state.calls.pop(call_key(context), None)
    if entry is not None:
        throw(entry[1], error)


async def run_call(
    state: Invocation, name: str, spec: ToolSpec, args: dict[str, Any], context: ToolContext, check: Check, body: Body
) -> Any:
    """A guarded tool's whole call at its body: proposed and reserved with the arguments the body gets, the body
    run (again, reserved, for each retry its policy allows), verified and settled. Returns the body's output, a
    committed write's stored one, or what the model reads instead (``{"error": ...}``)."""
    run = state.run
    call = run.propose(spec, name, args, context.function_call_id, check=check)
    if isinstance(call, Executed):
        return answer(state, context, call)
    steps = run.execute(spec, call)
    effect = await advance(steps, None)
    if isinstance(effect, Executed):
        return answer(state, context, effect)
    try:
        reply = Answer(await body())
    except asyncio.CancelledError as cancelled:
        throw(steps, cancelled)  # recorded in flight
        raise
    except Exception as exc:
        reply = Answer(error=exc)
    executed = await advance(steps, reply, rerun=body)
    assert isinstance(executed, Executed), "a settled call is executed"
    if executed.message is not None or executed.verdict is not None:
        return answer(state, context, executed)
    return executed.output


def answer(state: Invocation, context: ToolContext, executed: Executed) -> dict[str, Any]:
    """What the model reads for a call the guard refused, failed or answered itself; a verdict that ends the run
    ends the invocation (ADK calls neither the model nor a tool again)."""
    if state.run.verdict is not None:
        end_invocation(context)
    if executed.message is not None:
        return {"error": executed.message}
    return as_result(executed.output)


def as_result(output: Any) -> dict[str, Any]:
    return output if isinstance(output, dict) else {"result": output}
