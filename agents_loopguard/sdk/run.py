"""Run an agent under the guard and read one Outcome: ``run_guarded`` (async), ``run_guarded_sync``, and
``run_guarded_streamed``.

An entry point builds (or takes) the task's :class:`~agents_loopguard.Guard`, makes it reachable from the tools
(a contextvar), runs a guarded copy of the agent graph (every model wrapped, every plain function tool guarded as a
read, handoff targets included; the application's agents are untouched), and maps how the SDK run ended to one
:class:`~agents_loopguard.Outcome`:

===============================================  ==============================================================
SDK ending                                       Outcome
===============================================  ==============================================================
final output, done validated by a tool's verify  completed / validated_done (value: the verified tool output)
final output accepted by ``verify_output``       completed / validated_done (value: the final output)
final output, nothing validated it               partial / unverified_final (value: the last verified output)
a guard refusal or stop                          its own status and reason (same_call, tool_budget, ...)
``MaxTurnsExceeded`` (or its error handler)      stopped / max_turns
``ToolTimeoutError``                             stopped / tool_timeout (a write: needs_reconciliation)
guardrail tripwires                              stopped / guardrail
``ModelBehaviorError``, ``ModelRefusalError``    stopped / model_behavior
model API errors after the SDK's retries         stopped / model_error
cancellation (task cancel, ``stream.cancel()``)  stopped / cancelled, calls in flight in ``Outcome.in_flight``
approval interruptions                           needs_human / approval (``Outcome.result.to_state()``)
a write whose effect is unknown                  needs_reconciliation / unknown_commit (or executor_exception)
===============================================  ==============================================================

Expected limits come back as outcomes, never as exceptions; ``Outcome.result`` keeps the SDK's ``RunResult`` (or
the exception's ``run_data``). Programming errors (``UserError`` and anything unexpected) end the task as
``stopped/fatal`` and are re-raised (as in every adapter: the precedence is the guarded run's,
:mod:`agents_loopguard.run.conclusion`). Each entry point is a thin convenience over
:class:`~agents_loopguard.sdk.LoopGuard`, which attaches the same guard to your own ``Runner.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Literal, TypeVar

from agents import Agent, RunConfig, Runner, RunState
from agents.lifecycle import RunHooks
from agents.memory import Session
from agents.result import RunResult, RunResultStreaming
from agents.stream_events import StreamEvent
from typing_extensions import Unpack

from ..engine.core import Guard
from ..run import RunFields, RunOptions
from ..values.outcome import Outcome
from .attach import GuardStopped, LoopGuard

__all__ = [
    "RUNNER_KEYWORDS",
    "GuardStopped",
    "GuardedStream",
    "SdkRunFields",
    "run_guarded",
    "run_guarded_streamed",
    "run_guarded_sync",
]

_MISSING: Any = object()

RUNNER_KEYWORDS = (
    "context",
    "max_turns",
    "hooks",
    "run_config",
    "error_handlers",
    "previous_response_id",
    "auto_previous_response_id",
    "conversation_id",
    "session",
)
"""The keywords of ``Runner.run`` an entry point passes on."""


class SdkRunFields(RunFields, total=False):
    """:class:`~agents_loopguard.run.RunFields` and ``Runner.run``'s own keywords, for the entry points that pass
    both on (:func:`~agents_loopguard.sdk.resume_guarded`)."""

    context: Any
    max_turns: int | None
    hooks: RunHooks[Any] | None
    run_config: RunConfig | Mapping[str, Any] | None
    error_handlers: Any
    previous_response_id: str | None
    auto_previous_response_id: bool
    conversation_id: str | None
    session: Session | None


def runner_kwargs(
    guard: LoopGuard,
    *,
    hooks: Any,
    run_config: Any,
    error_handlers: Any,
    max_turns: Any = _MISSING,
    sdk: dict[str, Any],
) -> dict[str, Any]:
    """The keywords of the ``Runner.run`` a loop guard attaches to: the application's hooks, run config and error
    handlers composed with the guard's, the other ``sdk`` keywords that are not ``None``, and ``max_turns`` when
    given (here, ``None`` is a value)."""
    kwargs: dict[str, Any] = {
        "hooks": guard.hooks(hooks),
        "run_config": guard.run_config(run_config),
        "error_handlers": guard.error_handlers(error_handlers),
        **{name: value for name, value in sdk.items() if value is not None},
    }
    if max_turns is not _MISSING:
        kwargs["max_turns"] = max_turns
    return kwargs


async def run_guarded(
    agent: Agent[Any],
    input: Any,
    *,
    options: RunOptions | None = None,
    context: Any = None,
    max_turns: int | None = _MISSING,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | Mapping[str, Any] | None = None,
    error_handlers: Any = None,
    previous_response_id: str | None = None,
    auto_previous_response_id: bool = False,
    conversation_id: str | None = None,
    session: Session | None = None,
    **fields: Unpack[RunFields],
) -> Outcome:
    """Run ``agent`` on ``input`` under the task's guard and return its one :class:`~agents_loopguard.Outcome`.

    The guard's options come as one :class:`~agents_loopguard.RunOptions` (``options=``), as its fields given as
    keywords, or both (the keywords win): the task (``budget=`` with ``store=``, ``task_id=``, ``policy=``,
    ``secrets=``, or ``guard=``), ``verify_output=`` (lets a final answer complete the task; without it only a tool's
    ``verify`` saying ``done`` does), ``on_refusal=`` (``"end"``, ``"continue"``, ``"raise"``),
    ``release_tool_choice=``, ``prices=`` and ``estimate_input_tokens=`` (a cost budget needs the price of every
    model and ``ModelSettings.max_tokens``; a limit that cannot be enforced is refused before anything runs),
    ``on_pause=`` (default: the pause is stored, resumable with :func:`~agents_loopguard.sdk.resume_guarded`) and
    ``who=`` (who continues a paused ``RunState``). The other keywords are ``Runner.run``'s.

    A task that already ended returns its stored outcome without running anything. ``input`` may be the SDK's own
    ``RunState`` of an approval pause after ``state.approve(item)`` / ``state.reject(item)``: the run continues
    that task's stored pause (checked and claimed once, the decisions recorded, the counters continuing); a state
    that no stored pause waits for is refused with :class:`~agents_loopguard.ops.approvals.ResumeError`.

    >>> import asyncio
    >>> from agents import Agent, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, assistant_message
    >>> from agents_loopguard import Budget
    >>> set_tracing_disabled(True)
    >>> agent = Agent(name="a", model=ScriptedModel([[assistant_message("hi")]]))
    >>> outcome = asyncio.run(run_guarded(agent, "hello", budget=Budget(model_turns=3, tool_executions=3)))
    >>> outcome.status, outcome.reason, outcome.result.final_output
    (<Status.PARTIAL: 'partial'>, <Reason.UNVERIFIED_FINAL: 'unverified_final'>, 'hi')
    """
    guard = LoopGuard(input, options, **fields)
    if guard.finished is not None:
        return guard.finished
    sdk = {
        "context": context,
        "previous_response_id": previous_response_id,
        "auto_previous_response_id": auto_previous_response_id or None,
        "conversation_id": conversation_id,
        "session": session,
    }
    kwargs = runner_kwargs(
        guard, hooks=hooks, run_config=run_config, error_handlers=error_handlers, max_turns=max_turns, sdk=sdk
    )
    try:
        result: RunResult | BaseException | None = await Runner.run(agent, guard.input, **kwargs)
    except asyncio.CancelledError:
        result = None
    except Exception as exc:
        result = exc
    return await guard.outcome(result)


T = TypeVar("T")


def run_sync(start: Callable[[], Coroutine[Any, Any, T]], *, name: str) -> T:
    """Run the coroutine ``start()`` returns to completion on the thread's default loop, for the ``*_sync`` entry
    points: refused inside a running loop, and cancelled (then awaited) if the caller is interrupted."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(f"{name}_sync() cannot be called while an event loop is running: await {name}()")
    loop = _default_loop()
    task = loop.create_task(start())
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(task)
        raise
    finally:
        with contextlib.suppress(RuntimeError):
            loop.run_until_complete(loop.shutdown_asyncgens())


def _default_loop() -> asyncio.AbstractEventLoop:
    """The thread's default loop, as ``Runner.run_sync`` uses it (clients bound to it stay usable across runs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = asyncio.get_event_loop_policy()
        try:
            loop = policy.get_event_loop()
        except RuntimeError:
            loop = policy.new_event_loop()
            policy.set_event_loop(loop)
        if loop.is_closed():
            loop = policy.new_event_loop()
            policy.set_event_loop(loop)
    return loop


def run_guarded_sync(agent: Agent[Any], input: Any, **kwargs: Any) -> Outcome:
    """:func:`run_guarded` for synchronous code (same arguments). Not callable while an event loop is running.

    >>> from agents import Agent, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, assistant_message
    >>> from agents_loopguard import Budget
    >>> set_tracing_disabled(True)
    >>> agent = Agent(name="a", model=ScriptedModel([[assistant_message("hi")]]))
    >>> run_guarded_sync(agent, "hello", budget=Budget(model_turns=1, tool_executions=0)).used.models
    1
    """
    return run_sync(lambda: run_guarded(agent, input, **kwargs), name="run_guarded")


class GuardedStream:
    """A streamed guarded run: iterate :meth:`stream_events` (which starts the run), then ``await``
    :meth:`outcome`. Expected limits never raise out of :meth:`stream_events`; they end the stream and become the
    outcome.
    """

    def __init__(self, guard: LoopGuard, start: Callable[[], Any] | None) -> None:
        self._guard = guard
        self._start = start
        self._result: RunResultStreaming | None = None
        self._error: BaseException | None = None
        self._cancelled = False
        self._consumed = start is None
        self._outcome: Outcome | None = guard.finished

    @property
    def result(self) -> RunResultStreaming | None:
        """The SDK's streamed result, once the run started (``None`` before, or if the task had already ended)."""
        return self._result

    @property
    def guard(self) -> Guard:
        """The task's guard."""
        return self._guard.run.guard

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        """Start the run and yield the SDK's stream events (``RunResultStreaming.stream_events``), once."""
        if self._consumed or self._start is None:
            return
        self._consumed = True
        try:
            if self._guard.run.cancel_requested:  # cancelled before it started: nothing runs
                return
            self._result = await self._start()
            async for event in self._result.stream_events():
                yield event
        except asyncio.CancelledError:  # the task is recorded as cancelled before the cancellation goes on
            self._cancelled = True
            await self.outcome()
            raise
        except Exception as exc:
            self._error = exc

    def cancel(self, mode: Literal["immediate", "after_turn"] = "immediate") -> None:
        """Cancel the run through the SDK (``immediate`` or ``after_turn``); the outcome is ``stopped/cancelled``
        with the calls that were in flight."""
        self._guard.run.cancel_requested = True
        if self._result is not None:
            self._result.cancel(mode=mode)

    async def outcome(self) -> Outcome:
        """The run's outcome (consumes the remaining events first)."""
        if self._outcome is None:
            async for _ in self.stream_events():
                pass
            ended: RunResultStreaming | BaseException | None = self._error or self._result
            self._outcome = await self._guard.outcome(ended, cancelled=self._cancelled)
        return self._outcome


def run_guarded_streamed(
    agent: Agent[Any],
    input: Any,
    *,
    options: RunOptions | None = None,
    context: Any = None,
    max_turns: int | None = _MISSING,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | Mapping[str, Any] | None = None,
    error_handlers: Any = None,
    previous_response_id: str | None = None,
    auto_previous_response_id: bool = False,
    conversation_id: str | None = None,
    session: Session | None = None,
    **fields: Unpack[RunFields],
) -> GuardedStream:
    """A streamed guarded run (arguments as :func:`run_guarded`): the run starts, inside the running event loop,
    when :meth:`GuardedStream.stream_events` is first iterated.

    >>> import asyncio
    >>> from agents import Agent, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, assistant_message
    >>> from agents_loopguard import Budget
    >>> set_tracing_disabled(True)
    >>> async def main():
    ...     agent = Agent(name="a", model=ScriptedModel([[assistant_message("hi")]]))
    ...     stream = run_guarded_streamed(agent, "hello", budget=Budget(model_turns=2, tool_executions=2))
    ...     async for _event in stream.stream_events():
    ...         pass
    ...     return await stream.outcome()
    >>> asyncio.run(main()).status
    <Status.PARTIAL: 'partial'>
    """
    guard = LoopGuard(input, options, **fields)
    if guard.finished is not None:
        return GuardedStream(guard, None)
    sdk = {
        "context": context,
        "previous_response_id": previous_response_id,
        "auto_previous_response_id": auto_previous_response_id or None,
        "conversation_id": conversation_id,
        "session": session,
    }
    kwargs = runner_kwargs(
        guard, hooks=hooks, run_config=run_config, error_handlers=error_handlers, max_turns=max_turns, sdk=sdk
    )

    async def start() -> RunResultStreaming:
        given = guard.input
        if isinstance(given, RunState):  # restored against the guarded copies before the SDK's run task starts
            given = await guard.restored(agent, given)
        return Runner.run_streamed(agent, given, **kwargs)

    return GuardedStream(guard, start)
