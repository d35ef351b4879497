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
``stopped/fatal`` and are re-raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import Any, Literal, TypeVar

from agents import Agent, RunConfig, Runner, RunState
from agents.exceptions import (
    AgentsException,
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelRefusalError,
    ModelTimeoutError,
    OutputGuardrailTripwireTriggered,
    RunErrorDetails,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
    ToolTimeoutError,
)
from agents.lifecycle import RunHooks
from agents.models.interface import ModelProvider
from agents.result import RunResult, RunResultBase, RunResultStreaming
from agents.stream_events import StreamEvent

from .. import run as guarded
from ..approvals import ResumeError
from ..budget import Budget, Policy
from ..core import Guard, Verdict
from ..model_errors import classify_model_error
from ..outcome import Outcome, Reason, Status
from ..pricing import InputEstimator, Price
from ..run import GuardedRun, OnRefusal, Release, make_guard
from ..store.base import Store
from ._internal import ACTIVE_RUN, Halt, maybe_await, trace_decision
from .claims import ClaimedState, continue_pause
from .graph import guard_agent, guard_config, install_nested_guard
from .hooks import GuardHooks
from .pauses import persist_pause, waiting_detail
from .private import agent_of_tool, state_context

__all__ = ["GuardStopped", "GuardedStream", "run_guarded", "run_guarded_streamed", "run_guarded_sync"]

log = logging.getLogger(__name__)

OutputVerifier = Callable[[Any], Any]
"""``verify_output(final_output) -> bool | evidence`` (sync or async): the application's check of a final answer."""
OnPause = Callable[[RunResultBase, Guard], Any]
"""``on_pause(result, guard) -> pause_id | None`` (sync or async), called on an approval interruption before the
outcome is stored: persist ``result.to_state()`` with the task there; the returned id becomes ``Outcome.pause_id``."""

_GUARDRAIL_TRIPWIRES = (
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
)
_MISSING: Any = object()


class GuardStopped(AgentsException, guarded.GuardStopped):
    """Raised by the entry points with ``on_refusal="raise"`` when the guard stopped the run; ``.outcome`` is the
    (stored, sticky) outcome, ``.run_data`` the SDK's run data when the SDK had any."""

    def __init__(self, outcome: Outcome) -> None:
        guarded.GuardStopped.__init__(self, outcome)
        if isinstance(outcome.result, RunErrorDetails):
            self.run_data = outcome.result


# --- preparing a run ---------------------------------------------------------------------------------------


def start_run(
    guard: Guard | None,
    budget: Budget | None,
    store: Store | None,
    task_id: str | None,
    policy: Policy | None,
    *,
    on_refusal: OnRefusal,
    release: Release,
    prices: Mapping[str, Price] | None = None,
    estimate_input_tokens: InputEstimator | None = None,
) -> GuardedRun:
    """The guarded run of one SDK run: its guard (decisions traced as SDK spans), the refusal modes, the prices."""
    install_nested_guard()
    the_guard = make_guard(guard=guard, budget=budget, store=store, task_id=task_id, policy=policy)
    if the_guard.observer is None:  # guard decisions show as spans in the SDK's trace
        the_guard.observer = trace_decision
    run = GuardedRun(the_guard, on_refusal=on_refusal, release=release, raises=GuardStopped, prices=prices)
    if estimate_input_tokens is not None:
        run.estimate_input_tokens = estimate_input_tokens
    return run


def _entry(
    input: Any,
    guard: Guard | None,
    budget: Budget | None,
    store: Store | None,
    task_id: str | None,
    policy: Policy | None,
    *,
    who: str | None,
    on_refusal: OnRefusal,
    release: Release,
    prices: Mapping[str, Price] | None,
    estimate_input_tokens: InputEstimator | None,
) -> tuple[GuardedRun, Any]:
    """The run of an entry point and the input to give the SDK: a paused ``RunState`` continues its stored pause
    (its task's guard); a claimed one runs as is; anything else starts or continues the task named."""
    if isinstance(input, ClaimedState):
        input = input.state
    elif isinstance(input, RunState) and input.get_interruptions():
        guard = continue_pause(input, guard, store, task_id, policy, who)
        budget = store = task_id = policy = None
    elif isinstance(input, RunState):
        raise ResumeError(
            "run_guarded continues a RunState only from a stored approval pause (state.approve()/reject() on its "
            "interruptions); this state waits for no approval, and running it would start a fresh budget"
        )
    run = start_run(
        guard,
        budget,
        store,
        task_id,
        policy,
        on_refusal=on_refusal,
        release=release,
        prices=prices,
        estimate_input_tokens=estimate_input_tokens,
    )
    return run, input


@dataclasses.dataclass
class _Prepared:
    agent: Agent[Any]
    run_config: RunConfig
    hooks: GuardHooks
    error_handlers: Any
    owned_provider: ModelProvider | None
    max_turns_handled: bool = False
    """The SDK gives no sign that a ``max_turns`` error handler replaced ``MaxTurnsExceeded``: we mark it."""


def _graph(agent: Agent[Any]) -> list[Agent[Any]]:
    """The agents a run can reach by handoff or as a tool (``agent.as_tool()``); ``Handoff`` objects resolve at run
    time and are not followed, nor a ``Runner.run`` inside a tool body."""
    seen: dict[int, Agent[Any]] = {}
    todo = [agent]
    while todo:
        current = todo.pop()
        if id(current) not in seen:
            seen[id(current)] = current
            todo.extend(h for h in current.handoffs if isinstance(h, Agent))
            nested = (agent_of_tool(t) for t in current.tools)
            todo.extend(a for a in nested if isinstance(a, Agent))
    return list(seen.values())


def _check_metering(agent: Agent[Any], config: RunConfig, run: GuardedRun) -> None:
    """A cost budget or token limit the run could not enforce is refused before anything runs: every reachable
    agent's requests need an output bound (``max_tokens``) and, with a cost budget, a price for their model."""
    for member in _graph(agent):
        settings = member.model_settings.resolve(config.model_settings)
        model = config.model if config.model is not None else member.model
        name = model if isinstance(model, str) else getattr(getattr(model, "inner", model), "model", None)
        try:
            run.meter.check_output_bound(settings.max_tokens)
            run.meter.price_of(name if isinstance(name, str) else None)
        except ValueError as exc:
            raise ValueError(f"agent {member.name!r}: {exc}") from None


def _prepare(
    agent: Agent[Any],
    run: GuardedRun,
    *,
    hooks: RunHooks[Any] | None,
    run_config: RunConfig | dict[str, Any] | None,
    error_handlers: Any,
) -> _Prepared:
    owned = run_config is None or (isinstance(run_config, dict) and "model_provider" not in run_config)
    config = guard_config(run_config, run)
    _check_metering(agent, config, run)
    prepared = _Prepared(
        agent=guard_agent(agent),
        run_config=config,
        hooks=GuardHooks(run, hooks),
        error_handlers=error_handlers,
        owned_provider=config.model_provider if owned else None,
    )
    if error_handlers and "max_turns" in error_handlers:
        handle = error_handlers["max_turns"]

        def marked(data: Any) -> Any:
            prepared.max_turns_handled = True
            return handle(data)

        prepared.error_handlers = {**error_handlers, "max_turns": marked}
    return prepared


async def _resumable(input: Any, prepared: _Prepared) -> Any:
    """A ``RunState`` was restored against the application's agents; the SDK resumes with the state's agents, so
    the state is restored again against their guarded copies (agents match by name), keeping its context."""
    if not isinstance(input, RunState):
        return input
    context = state_context(input)
    if context is None:  # this SDK keeps it elsewhere: the state's JSON carries it (see .private)
        return await RunState.from_json(prepared.agent, input.to_json())
    data = input.to_json(context_serializer=lambda _context: {})
    return await RunState.from_json(prepared.agent, data, context_override=context)


def _runner_kwargs(prepared: _Prepared, context: Any, max_turns: Any, extra: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "context": context,
        "hooks": prepared.hooks,
        "run_config": prepared.run_config,
        "error_handlers": prepared.error_handlers,
        **extra,
    }
    if max_turns is not _MISSING:
        kwargs["max_turns"] = max_turns
    return kwargs


async def _close(prepared: _Prepared) -> None:
    if prepared.owned_provider is not None:
        try:
            await prepared.owned_provider.aclose()
        except Exception:  # as the SDK does for the provider it creates
            log.warning("failed to close the model provider created for the run", exc_info=True)


# --- concluding a run --------------------------------------------------------------------------------------


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def error_verdict(run: GuardedRun, error: BaseException) -> Verdict | None:
    """What an exception out of the SDK run means; ``None`` for a programming error."""
    if run.verdict is not None:  # decided by the guard before the SDK noticed anything
        return run.verdict
    if isinstance(error, Halt):
        return error.verdict
    for cause in _chain(error):
        failed = run.failures.get(id(cause))
        if failed is not None:  # a tool failure the guard recorded, re-raised by failure_error_function=None
            return failed
    if isinstance(error, MaxTurnsExceeded):
        return Verdict(Status.STOPPED, Reason.MAX_TURNS, str(error))
    if isinstance(error, ToolTimeoutError):
        return run.timed_out(error.tool_name, error)
    if isinstance(error, _GUARDRAIL_TRIPWIRES):
        return Verdict(Status.STOPPED, Reason.GUARDRAIL, f"{type(error).__name__}: {error}")
    if isinstance(error, (ModelBehaviorError, ModelRefusalError)):
        return Verdict(Status.STOPPED, Reason.MODEL_BEHAVIOR, f"{type(error).__name__}: {error}")
    if isinstance(error, ModelTimeoutError):
        return Verdict(Status.STOPPED, Reason.MODEL_ERROR, f"{type(error).__name__}: {error}")
    failure = classify_model_error(error)
    return run.model_error(failure) if failure is not None else None


async def _final_verdict(
    run: GuardedRun, result: RunResultBase, prepared: _Prepared, verify_output: OutputVerifier | None
) -> Verdict:
    """How a run that returned normally ends: a pause, a limit an error handler answered, validated done, or the
    final answer's verdict."""
    run.drain_interrupted()
    if run.verdict is not None:
        return run.verdict
    if getattr(result, "interruptions", None):
        return Verdict(Status.NEEDS_HUMAN, Reason.APPROVAL, waiting_detail(result))
    if prepared.max_turns_handled:
        return Verdict(Status.STOPPED, Reason.MAX_TURNS, "max_turns reached; an error handler gave the output")
    if run.done is not None:
        return run.done
    check = run.final_check(verify_output, result.final_output)
    answer = None
    if check is not None:
        try:
            answer = guarded.Answer(await guarded.perform_check_async(check))
        except Exception as exc:
            answer = guarded.Answer(error=exc)
    return run.final_verdict(result.final_output, answer)


async def _conclude(
    run: GuardedRun,
    prepared: _Prepared,
    *,
    result: RunResultBase | None,
    error: BaseException | None,
    cancelled: bool,
    verify_output: OutputVerifier | None,
    on_pause: OnPause | None,
) -> Outcome:
    """Map how the SDK run ended to the task's one Outcome (stored, sticky)."""
    sdk_result: Any = result
    pause_id: str | None = None
    if cancelled or run.cancel_requested:
        verdict = Verdict(Status.STOPPED, Reason.CANCELLED, "the run was cancelled")
    elif error is not None:
        sdk_result = getattr(error, "run_data", None)
        known = error_verdict(run, error)
        if known is None:
            run.end(Verdict(Status.STOPPED, Reason.FATAL, f"{type(error).__name__}: {error}"), result=sdk_result)
            raise error
        verdict = known
    else:
        assert result is not None
        verdict = await _final_verdict(run, result, prepared, verify_output)
        if verdict.reason is Reason.APPROVAL and verdict is not run.verdict:
            # the default stores the pause, resumable in any process (resume_guarded)
            paused = await maybe_await((on_pause or persist_pause)(result, run.guard))
            pause_id = paused if isinstance(paused, str) else None
    final_output = getattr(result, "final_output", None) if result is not None else None
    return run.end(verdict, result=sdk_result, pause_id=pause_id, final_output=final_output)


# --- entry points ------------------------------------------------------------------------------------------


async def run_guarded(
    agent: Agent[Any],
    input: Any,
    *,
    budget: Budget | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    policy: Policy | None = None,
    guard: Guard | None = None,
    verify_output: OutputVerifier | None = None,
    on_refusal: OnRefusal = "end",
    release_tool_choice: Release = "none",
    on_pause: OnPause | None = None,
    who: str | None = None,
    prices: Mapping[str, Price] | None = None,
    estimate_input_tokens: InputEstimator | None = None,
    context: Any = None,
    max_turns: int | None = _MISSING,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | dict[str, Any] | None = None,
    error_handlers: Any = None,
    **runner_options: Any,
) -> Outcome:
    """Run ``agent`` on ``input`` under the task's guard and return its one :class:`~agents_loopguard.Outcome`.

    Args:
        budget, store, task_id, policy: build the task's :class:`~agents_loopguard.Guard` (or pass ``guard=``). The
            budget is the task's, kept in ``store``: a second run of the same ``task_id`` continues its counters.
        verify_output: optional ``verify_output(final_output) -> bool | evidence``: lets a final answer complete the
            task. Without it only a tool's ``verify`` saying ``done`` completes it; any other answer is ``partial``.
        on_refusal: ``"end"`` (default) ends the run with the refusal's outcome; ``"continue"`` tells the model why
            a call was refused and goes on (the budget still holds; the same call stays refused); ``"raise"`` ends
            the run and raises :class:`GuardStopped`.
        release_tool_choice: what replaces a forced ``tool_choice`` once no work remains: ``"none"`` (default, as the
            raw function-calling loop does: the model answers) or ``"auto"``.
        who: who continues a paused ``RunState`` (recorded with the decisions); only used when ``input`` is one.
        prices: the price table of the models (:class:`~agents_loopguard.pricing.Price` per model name), required
            with ``Budget(cost=...)``: each model attempt reserves its worst case first (input estimate plus
            ``ModelSettings.max_tokens``) and settles it with the reported usage. Token limits of the budget need
            ``ModelSettings.max_tokens`` too; a limit that cannot be enforced is refused before anything runs.
        estimate_input_tokens: ``estimate(request) -> int``, the input tokens of a model request (its
            ``instructions``, ``input`` and offered ``tools``) for the worst case reserved before it is sent. Default:
            a generous byte bound (:func:`~agents_loopguard.pricing.estimate_input_tokens`); give your own when
            requests carry images, audio or files, which their bytes do not bound.
        on_pause: ``on_pause(result, guard) -> pause_id``, called on an approval interruption. Default:
            :func:`~agents_loopguard.sdk.persist_pause` stores the pause in the task's store (resume it with
            :func:`~agents_loopguard.sdk.resume_guarded`); ``lambda result, guard: None`` stores nothing.
        context, max_turns, hooks, run_config, error_handlers, **runner_options: as for ``Runner.run``.

    A task that already ended returns its stored outcome without running anything. ``input`` may be the SDK's own
    ``RunState`` of an approval pause after ``state.approve(item)`` / ``state.reject(item)``: the run continues
    that task's stored pause (checked and claimed once, the decisions recorded, the counters continuing); a state
    that no stored pause waits for is refused with :class:`~agents_loopguard.approvals.ResumeError`.

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
    run, input = _entry(
        input,
        guard,
        budget,
        store,
        task_id,
        policy,
        who=who,
        on_refusal=on_refusal,
        release=release_tool_choice,
        prices=prices,
        estimate_input_tokens=estimate_input_tokens,
    )
    if run.guard.outcome is not None:
        return run.guard.outcome
    prepared = _prepare(agent, run, hooks=hooks, run_config=run_config, error_handlers=error_handlers)
    kwargs = _runner_kwargs(prepared, context, max_turns, runner_options)
    result: RunResult | None = None
    error: BaseException | None = None
    cancelled = False
    token = ACTIVE_RUN.set(run)
    try:
        result = await Runner.run(prepared.agent, await _resumable(input, prepared), **kwargs)
    except asyncio.CancelledError:
        cancelled = True
    except Exception as exc:
        error = exc
    finally:
        ACTIVE_RUN.reset(token)
        await _close(prepared)
    return await _conclude(
        run, prepared, result=result, error=error, cancelled=cancelled, verify_output=verify_output, on_pause=on_pause
    )


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

    def __init__(
        self,
        run: GuardedRun,
        *,
        start: Callable[[], Any] | None,
        prepared: _Prepared | None,
        verify_output: OutputVerifier | None,
        on_pause: OnPause | None,
        outcome: Outcome | None = None,
    ) -> None:
        self._run = run
        self._start = start
        self._prepared = prepared
        self._result: RunResultStreaming | None = None
        self._verify_output = verify_output
        self._on_pause = on_pause
        self._outcome = outcome
        self._error: BaseException | None = None
        self._cancelled = False
        self._consumed = start is None

    @property
    def result(self) -> RunResultStreaming | None:
        """The SDK's streamed result, once the run started (``None`` before, or if the task had already ended)."""
        return self._result

    @property
    def guard(self) -> Guard:
        """The task's guard."""
        return self._run.guard

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        """Start the run and yield the SDK's stream events (``RunResultStreaming.stream_events``), once."""
        if self._consumed or self._start is None:
            return
        self._consumed = True
        try:
            if self._run.cancel_requested:  # cancelled before it started: nothing runs
                return
            self._result = await self._start()
            async for event in self._result.stream_events():
                yield event
        except asyncio.CancelledError:
            self._cancelled = True
            raise
        except Exception as exc:
            self._error = exc

    def cancel(self, mode: Literal["immediate", "after_turn"] = "immediate") -> None:
        """Cancel the run through the SDK (``immediate`` or ``after_turn``); the outcome is ``stopped/cancelled``
        with the calls that were in flight."""
        self._run.cancel_requested = True
        if self._result is not None:
            self._result.cancel(mode=mode)

    async def outcome(self) -> Outcome:
        """The run's outcome (consumes the remaining events first)."""
        if self._outcome is None:
            async for _ in self.stream_events():
                pass
            if self._prepared is not None:
                await _close(self._prepared)
            assert self._prepared is not None
            self._outcome = await _conclude(
                self._run,
                self._prepared,
                result=self._result if self._error is None else None,
                error=self._error,
                cancelled=self._cancelled,
                verify_output=self._verify_output,
                on_pause=self._on_pause,
            )
        return self._outcome


def run_guarded_streamed(
    agent: Agent[Any],
    input: Any,
    *,
    budget: Budget | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    policy: Policy | None = None,
    guard: Guard | None = None,
    verify_output: OutputVerifier | None = None,
    on_refusal: OnRefusal = "end",
    release_tool_choice: Release = "none",
    on_pause: OnPause | None = None,
    who: str | None = None,
    prices: Mapping[str, Price] | None = None,
    estimate_input_tokens: InputEstimator | None = None,
    context: Any = None,
    max_turns: int | None = _MISSING,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | dict[str, Any] | None = None,
    error_handlers: Any = None,
    **runner_options: Any,
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
    run, input = _entry(
        input,
        guard,
        budget,
        store,
        task_id,
        policy,
        who=who,
        on_refusal=on_refusal,
        release=release_tool_choice,
        prices=prices,
        estimate_input_tokens=estimate_input_tokens,
    )
    if run.guard.outcome is not None:
        return GuardedStream(
            run, start=None, prepared=None, verify_output=None, on_pause=None, outcome=run.guard.outcome
        )
    prepared = _prepare(agent, run, hooks=hooks, run_config=run_config, error_handlers=error_handlers)
    kwargs = _runner_kwargs(prepared, context, max_turns, runner_options)

    async def start() -> RunResultStreaming:
        resumed = await _resumable(input, prepared)
        token = ACTIVE_RUN.set(run)  # the SDK starts its run task now: that task copies this context
        try:
            return Runner.run_streamed(prepared.agent, resumed, **kwargs)
        finally:
            ACTIVE_RUN.reset(token)

    return GuardedStream(run, start=start, prepared=prepared, verify_output=verify_output, on_pause=on_pause)
