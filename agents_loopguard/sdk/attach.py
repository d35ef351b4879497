"""Attach the guard to your own ``Runner.run``: :class:`LoopGuard` hands over the hooks and the run config to pass
(composed with yours) and reads the one :class:`~agents_loopguard.Outcome` from the result or from the exception
the SDK raised. :func:`~agents_loopguard.sdk.run_guarded` is a thin convenience over it.

The SDK's default agent runner is wrapped (see :mod:`.graph`): a ``Runner.run`` given a loop guard's hooks runs the
guarded copy of the agent graph (every model wrapped, plain function tools guarded as reads) with the guard active,
so the guarantees and the stored task are those of ``run_guarded``.

What the adapter translates, and nothing more: how the SDK run ended (``MaxTurnsExceeded``, guardrail tripwires,
``ModelBehaviorError``, a tool's timeout, approval interruptions, a cancellation) into an
:class:`~agents_loopguard.run.Ending`; the guarded run decides the verdict (:mod:`agents_loopguard.run.conclusion`).

>>> import asyncio
>>> from agents import Agent, Runner, set_tracing_disabled
>>> from agents.testing import ScriptedModel, assistant_message
>>> from agents_loopguard import Budget, MemoryStore
>>> set_tracing_disabled(True)
>>> async def main():
...     guard = LoopGuard("hello", budget=Budget(model_turns=3, tool_executions=3), store=MemoryStore())
...     agent = Agent(name="a", model=ScriptedModel([[assistant_message("hi")]]))
...     result = await Runner.run(agent, guard.input, hooks=guard.hooks(), run_config=guard.run_config())
...     return await guard.outcome(result)
>>> outcome = asyncio.run(main())
>>> outcome.reason, outcome.used.models
(<Reason.UNVERIFIED_FINAL: 'unverified_final'>, 1)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from agents import Agent, RunConfig, RunState
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
    UserError,
)
from agents.lifecycle import RunHooks
from agents.models.interface import ModelProvider
from agents.result import RunResultBase
from typing_extensions import Unpack

from .. import run as guarded
from ..ops.approvals import ResumeError
from ..run import Ending, GuardedRun, RunFields, RunOptions, StopKind, adrive, conclude, perform_check_async
from ..values.outcome import Outcome
from ._internal import Halt, trace_decision
from .claims import ClaimedState, continue_pause
from .graph import guard_agent, guard_config, install_nested_guard, is_copy, restore_on
from .hooks import GuardHooks
from .kinds import admit_tools
from .model import is_step_model
from .pauses import persist_pause, waiting_detail
from .private import agent_of_tool

__all__ = ["Entering", "GuardStopped", "LoopGuard"]

Entering = Callable[[Agent[Any], Any, dict[str, Any]], None]
"""``entering(agent, input, runner_kwargs)``: what a composing runner prepares when its run enters the guard."""

log = logging.getLogger(__name__)

_STOPS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], StopKind], ...] = (
    (MaxTurnsExceeded, "max_turns"),
    (ToolTimeoutError, "tool_timeout"),
    (
        (
            InputGuardrailTripwireTriggered,
            OutputGuardrailTripwireTriggered,
            ToolInputGuardrailTripwireTriggered,
            ToolOutputGuardrailTripwireTriggered,
        ),
        "guardrail",
    ),
    ((ModelBehaviorError, ModelRefusalError), "model_behavior"),
    (ModelTimeoutError, "model_error"),
)
"""The SDK's own stops, as the guarded run names them."""


class GuardStopped(AgentsException, guarded.GuardStopped):
    """Raised with ``on_refusal="raise"`` when the guard stopped the run; ``.outcome`` is the (stored, sticky)
    outcome, ``.run_data`` the SDK's run data when the SDK had any."""

    def __init__(self, outcome: Outcome) -> None:
        guarded.GuardStopped.__init__(self, outcome)
        if isinstance(outcome.result, RunErrorDetails):
            self.run_data = outcome.result


def _input_of(input: Any, options: RunOptions) -> tuple[Any, RunOptions]:
    """The input to give the SDK and the options of its task: a paused ``RunState`` continues its stored pause (its
    task, claimed once, the decisions recorded); a claimed one runs as is; anything else starts or continues the
    task the options name."""
    if isinstance(input, ClaimedState):
        return input.state, options
    if isinstance(input, RunState) and input.get_interruptions():
        return input, continue_pause(input, options)
    if isinstance(input, RunState):
        raise ResumeError(
            "a guarded run continues a RunState only from a stored approval pause (state.approve()/reject() on its "
            "interruptions); this state waits for no approval, and running it would start a fresh budget"
        )
    return input, options


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


def _check_enforceable(agent: Agent[Any], config: RunConfig, run: GuardedRun) -> None:
    """Every reachable agent's requests can be metered: refused before anything runs otherwise."""
    for member in _graph(agent):
        settings = member.model_settings.resolve(config.model_settings)
        model = config.model if config.model is not None else member.model
        name = model if isinstance(model, str) else getattr(getattr(model, "inner", model), "model", None)
        where = f"agent {member.name!r}"
        run.check_enforceable(name if isinstance(name, str) else None, settings.max_tokens, where=where)


def _check_tools(agent: Agent[Any], run: GuardedRun) -> None:
    """Every tool of the reachable agents, before anything runs: declared once (a tool declared by its wrapper and,
    differently, in ``RunOptions.tools`` is refused), and a tool whose body the guard cannot reach (a hosted tool,
    an unknown type) refused unless ``RunOptions.unguarded`` opts it out (see :mod:`.kinds`)."""
    for member in _graph(agent):
        admit_tools(run, member.tools)


def _guarded_copy(agent: Agent[Any]) -> Agent[Any]:
    """The guarded copy of an agent the application runs; refused for an agent a durable engine already wrapped
    (its tools' ordering would sit outside the guard, and its replays would not be recognised)."""
    if is_step_model(agent.model):
        raise UserError(
            f"agent {agent.name!r} was wrapped by a durable engine ({type(agent.model).__name__}) before the guard saw "
            "it: run it through the engine's adapter in agents_loopguard.durable (e.g. run_guarded_dbos), which "
            "guards the agent first"
        )
    return guard_agent(agent)


def _stop_of(error: BaseException) -> tuple[StopKind | None, str | None]:
    for kinds, kind in _STOPS:
        if isinstance(error, kinds):
            return kind, getattr(error, "tool_name", None) if kind == "tool_timeout" else None
    return None, None


class LoopGuard:
    """The guard of one SDK run, attached to your own ``Runner.run`` / ``Runner.run_streamed`` call.

    Build it from the options (``options=`` and/or their fields as keywords) and the input you will run, then pass
    ``guard.input``, ``guard.hooks(yours)`` and ``guard.run_config(yours)`` (and ``guard.error_handlers(yours)``
    if you give error handlers) to the SDK, and read ``await guard.outcome(result_or_exception)``. The task, its
    store and its counters are those of :func:`~agents_loopguard.sdk.run_guarded` with the same options.

    ``input`` may be the SDK's ``RunState`` of an approval pause after ``state.approve(item)`` /
    ``state.reject(item)``: the run continues that task's stored pause (checked and claimed once). A task that
    already ended is not run again: ``guard.finished`` is its stored outcome (a ``Runner.run`` with these hooks is
    refused with it).
    """

    def __init__(self, input: Any, options: RunOptions | None = None, **fields: Unpack[RunFields]) -> None:
        install_nested_guard()
        self.input, opts = _input_of(input, RunOptions.merge(options, fields))
        self.run = GuardedRun.start(opts, observer=trace_decision, raises=GuardStopped)
        self._hooks: GuardHooks | None = None
        self._owned: list[ModelProvider] = []
        self._max_turns_handled = False
        self._restored: RunState[Any] | None = None
        self._composed = False
        self._entering: Entering | None = None

    @property
    def finished(self) -> Outcome | None:
        """The stored outcome when the task had already ended before this run (nothing will run)."""
        return self.run.guard.outcome

    def hooks(self, hooks: RunHooks[Any] | None = None) -> GuardHooks:
        """The run hooks to pass to ``Runner.run`` (yours run after the guard's)."""
        if self._hooks is None or self._hooks.inner is not hooks:
            self._hooks = GuardHooks(self.run, hooks, attached=self)
        return self._hooks

    def run_config(self, run_config: RunConfig | Mapping[str, Any] | None = None) -> RunConfig:
        """``run_config`` (a copy) with its model provider and model wrapped: every model attempt reserved."""
        owned = run_config is None or (isinstance(run_config, Mapping) and "model_provider" not in run_config)
        config = guard_config(dict(run_config) if isinstance(run_config, Mapping) else run_config, self.run)
        if owned:  # the provider the SDK would have made: closed with the run, as the SDK does
            self._owned.append(config.model_provider)
        return config

    def error_handlers(self, handlers: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """``handlers`` for ``Runner.run(error_handlers=...)``: a ``max_turns`` handler that answers still ends the
        task ``stopped/max_turns`` (the SDK gives no sign that it fired, so the guard marks it)."""
        if not handlers or "max_turns" not in handlers:
            return dict(handlers) if handlers else None
        handle = handlers["max_turns"]

        def marked(data: Any) -> Any:
            self._max_turns_handled = True
            return handle(data)

        return {**handlers, "max_turns": marked}

    def compose(self, agent: Agent[Any], *, entering: Entering | None = None) -> Agent[Any]:
        """The guarded copy of ``agent``, for a runner that wraps the agent itself before its ``Runner.run`` (a
        durable engine's: its model step around the guarded model, its tool ordering around the guarded tools);
        that runner's clone of the copy then runs as it is given (see :mod:`agents_loopguard.durable`).
        ``entering(clone, input, runner_kwargs)`` is called when the run enters, with the input restored."""
        self._composed, self._entering = True, entering
        return guard_agent(agent)

    @property
    def composed(self) -> bool:
        """True once :meth:`compose` made the copy the run is given."""
        return self._composed

    async def enter(self, agent: Agent[Any], input: Any, kwargs: dict[str, Any]) -> tuple[Agent[Any], Any]:
        """Called by the wrapped default agent runner when a ``Runner.run`` carries these hooks: the guarded copy
        of ``agent`` and the input restored against it; refused when the task already ended or the input is not
        the one this guard was built for."""
        self._check_entry(input)
        copy = agent if self._composed else _guarded_copy(agent)
        kwargs["run_config"] = guard_config(kwargs.get("run_config"), self.run)
        _check_enforceable(agent, kwargs["run_config"], self.run)
        _check_tools(agent, self.run)
        if isinstance(input, RunState) and input is not self._restored:  # the application's state stays as it was
            input = await self.restored(agent, input)
        if self._entering is not None:
            self._entering(copy, input, kwargs)
        return copy, input

    async def restored(self, agent: Agent[Any], state: RunState[Any]) -> RunState[Any]:
        """``state`` restored against the guarded copies of ``agent``'s graph (the SDK resumes with the state's
        agents, matched by name), keeping its context; it becomes this guard's input."""
        copy = agent if self._composed else guard_agent(agent)
        restored = await restore_on(copy, state)
        self.input = self._restored = restored
        return restored

    def enter_streamed(self, agent: Agent[Any], input: Any, kwargs: dict[str, Any]) -> Agent[Any]:
        """:meth:`enter` for ``Runner.run_streamed`` (synchronous: a ``RunState`` must already be restored against
        the guarded copies, as :func:`~agents_loopguard.sdk.run_guarded_streamed` does)."""
        self._check_entry(input)
        if isinstance(input, RunState) and not is_copy(getattr(input, "_current_agent", None)):
            raise ResumeError(
                "a streamed resume of a RunState under the guard goes through run_guarded_streamed(agent, state, ...)"
            )
        copy = _guarded_copy(agent)
        kwargs["run_config"] = guard_config(kwargs.get("run_config"), self.run)
        _check_enforceable(agent, kwargs["run_config"], self.run)
        _check_tools(agent, self.run)
        return copy

    def _check_entry(self, input: Any) -> None:
        if self.finished is not None:  # the task ended before: nothing runs, the stored outcome stands
            terminal = self.run.checkpoint()
            assert terminal is not None, "a finished task always has its terminal verdict"
            raise Halt(terminal)
        given = input.state if isinstance(input, ClaimedState) else input
        if isinstance(given, RunState) and given is not self.input:
            raise ResumeError("this LoopGuard was built for another input: LoopGuard(state, ...) for a RunState")

    async def outcome(self, result: RunResultBase | BaseException | None = None, *, cancelled: bool = False) -> Outcome:
        """The task's one outcome, from the SDK's result or from the exception ``Runner.run`` raised (stored,
        sticky; a programming error is re-raised after the task ended ``stopped/fatal``)."""
        await self.close()
        if self.finished is not None:
            return self.finished
        ending = self.ending(result, cancelled=cancelled)
        return await adrive(conclude(self.run, ending), perform_check_async)

    def ending(self, result: RunResultBase | BaseException | None, *, cancelled: bool = False) -> Ending:
        """What the SDK run came to, as the guarded run reads it."""
        if cancelled or result is None:
            return Ending(cancelled=True)
        if isinstance(result, BaseException):
            return self.ending_of(result)
        waiting = waiting_detail(result) if getattr(result, "interruptions", None) else None
        return Ending(
            output=result.final_output,
            waiting=waiting,
            store_pause=persist_pause,
            stopped_by="max_turns" if self._max_turns_handled else None,
            detail="max_turns reached; an error handler gave the output" if self._max_turns_handled else None,
            result=result,
        )

    @staticmethod
    def ending_of(error: BaseException) -> Ending:
        """What an exception out of the SDK run means, as the guarded run reads it (the SDK's own stops named)."""
        kind, tool = _stop_of(error)
        return Ending(error=error, stopped_by=kind, tool=tool, result=getattr(error, "run_data", None))

    async def close(self) -> None:
        """Close the model provider the guard made for the run (as the SDK closes the one it makes)."""
        owned, self._owned = self._owned, []
        for provider in owned:
            try:
                await provider.aclose()
            except Exception:  # as the SDK does for the provider it creates
                log.warning("failed to close the model provider created for the run", exc_info=True)
