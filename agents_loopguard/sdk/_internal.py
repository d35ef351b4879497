"""What the Agents SDK adapter shares between its modules: the active run, the halt that ends an SDK run, and the
trace spans of guard decisions.

The rules are the guarded run's (:class:`~agents_loopguard.run.GuardedRun`) and the engine's; this module only

* makes the active run reachable from tools that were decorated at import time (a contextvar, which asyncio copies
  into every task the SDK creates and ``asyncio.to_thread`` copies into the thread of a sync tool);
* turns a verdict that ends the run into an exception the SDK keeps (:class:`Halt`);
* performs the effects of a tool execution on the event loop (:func:`execute`).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from agents.exceptions import AgentsException, UserError
from agents.tracing import custom_span, get_current_trace
from agents.tracing.traces import NoOpTrace

from ..engine.core import Call, Guard, Verdict
from ..run import Execute, Executed, GuardedRun, ToolSpec, adrive, perform_check_async, within_deadline

__all__ = [
    "ACTIVE_RUN",
    "BODY_STARTS",
    "Halt",
    "current_guard",
    "execute",
    "maybe_await",
    "outside_a_run",
    "trace_decision",
]


def trace_decision(event: str, data: dict[str, Any]) -> None:
    """A :class:`~agents_loopguard.Guard` observer: each guard decision becomes a ``loopguard.<event>`` custom
    span in the current Agents SDK trace (nothing when tracing is off or no trace is active). The data carries ids,
    counters and reasons, never arguments or results."""
    current = get_current_trace()
    if current is None or isinstance(current, NoOpTrace):
        return
    with custom_span(f"loopguard.{event}", data=dict(data)):
        pass


ACTIVE_RUN: ContextVar[GuardedRun | None] = ContextVar("agents_loopguard_run", default=None)
"""The guarded run of the current task (set by the entry points; copied by asyncio into tool tasks and threads)."""


def outside_a_run(what: str) -> UserError:
    """The error for guarded code called with no guarded run active, naming every way to run it under one."""
    return UserError(
        f"{what} was invoked outside a guarded run. Run the agent under the guard in one of these ways: "
        "agents_loopguard.sdk.run_guarded(agent, input, budget=...) (or run_guarded_sync / run_guarded_streamed); "
        "your own Runner.run with a LoopGuard's hooks and run config: guard = LoopGuard(input, budget=...), then "
        "Runner.run(agent, guard.input, hooks=guard.hooks(), run_config=guard.run_config()) and "
        "await guard.outcome(result) (Runner.run_sync and run_streamed take the same two); in a durable workflow, "
        "agents_loopguard.durable's run_guarded_dbos / run_guarded_restate / run_guarded_temporal; one tool call "
        "in a test: agents_loopguard.sdk.testing.call_tool"
    )


def current_guard() -> Guard | None:
    """The :class:`~agents_loopguard.Guard` of the guarded run this code runs in, or ``None`` outside one.

    Works in async tools, in parallel tool calls and in sync tools (which the SDK runs in a thread).

    >>> current_guard() is None
    True
    """
    run = ACTIVE_RUN.get()
    return run.guard if run is not None else None


class Halt(AgentsException):
    """Ends an SDK run at a guard checkpoint. An ``AgentsException`` so that the SDK keeps its type (and run data)."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(f"agents_loopguard stopped the run: {verdict.status}/{verdict.reason}")
        self.verdict = verdict


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


BODY_STARTS: weakref.WeakKeyDictionary[GuardedRun, dict[str, Callable[[], Awaitable[None]]]] = (
    weakref.WeakKeyDictionary()
)
"""Per run, by call id: the application's ``on_tool_start`` of a guarded call, held back by
:class:`~agents_loopguard.sdk.GuardHooks` until the guard lets the body run (:func:`execute` fires it once)."""


async def execute(run: GuardedRun, spec: ToolSpec, call: Call, body: Callable[[], Awaitable[Any]]) -> Executed:
    """The guarded run's execution of ``call`` on the event loop: the body is the SDK's (or the tool's own). The
    application's held-back ``on_tool_start`` of the call fires right before its body first runs, never for a call
    the guard refuses or answers from the ledger."""

    async def perform(effect: Any) -> Any:
        if isinstance(effect, Execute):
            start = BODY_STARTS.get(run, {}).pop(call.call_id, None) if call.call_id is not None else None
            if start is not None:
                await start()
            return await within_deadline(body(), effect.timeout)
        return await perform_check_async(effect)

    return await adrive(run.execute(spec, call), perform)
