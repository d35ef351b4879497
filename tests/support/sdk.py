"""Helpers shared by the Agents SDK tests: run a guarded agent (streamed or not) to its Outcome, read what the model
was told, and the verify functions several modules use."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from agents import Agent, RunContextWrapper, Runner
from agents.tool import default_tool_error_function

from agents_loopguard import Outcome
from agents_loopguard.sdk import LoopGuard, run_guarded, run_guarded_streamed

__all__ = ["committed", "done_at_two", "guarded_outcome", "sdk_tool_error", "told", "told_by_id"]


async def guarded_outcome(
    agent: Agent[Any], input: Any = "go", *, stream: bool = False, mode: str = "", **kwargs: Any
) -> Outcome:
    """``run_guarded(agent, input, **kwargs)``; ``run_guarded_streamed`` with every event consumed
    (``stream=True`` or ``mode="streamed"``); or the application's own ``Runner.run`` with a
    :class:`~agents_loopguard.sdk.LoopGuard` attached (``mode="attached"``); then its outcome."""
    if mode == "attached":
        guard = LoopGuard(input, **kwargs)
        try:
            result: Any = await Runner.run(agent, guard.input, hooks=guard.hooks(), run_config=guard.run_config())
        except asyncio.CancelledError:  # the application's cancellation: recorded, then it goes on
            await guard.outcome(cancelled=True)
            raise
        except Exception as exc:  # the SDK raised: the guard reads the outcome from the exception
            result = exc
        return await guard.outcome(result)
    if not (stream or mode == "streamed"):
        return await run_guarded(agent, input, **kwargs)
    run = run_guarded_streamed(agent, input, **kwargs)
    async for _ in run.stream_events():
        pass
    return await run.outcome()


def sdk_tool_error(error: Exception) -> str:
    """What the installed SDK's default failure policy tells the model about a tool body's ``error`` (0.22 appends
    the error's text; 0.23 and later send a fixed message)."""
    return default_tool_error_function(RunContextWrapper(context=None), error)


def told(items: Iterable[Any]) -> list[Any]:
    """The outputs of the ``function_call_output`` items of a model call's input (what the model was told), in
    order."""
    return [i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


def told_by_id(items: Iterable[Any]) -> dict[str, Any]:
    """call id -> output, for the ``function_call_output`` items of a model call's input."""
    return {i["call_id"]: i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"}


def committed(args: dict[str, Any], output: Any) -> dict[str, Any]:
    """Evidence of a write the receiver confirms committed (revision 1, not done)."""
    return {"revision": 1, "done": False, "effect": "committed"}


def done_at_two(args: dict[str, Any], output: Any) -> dict[str, Any]:
    """Evidence of ``check_order``: the revision is the order checked; checking order 2 finds the task done."""
    return {"revision": args["order"], "done": args["order"] >= 2, "effect": "none"}
