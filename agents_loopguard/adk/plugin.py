"""The guard as a Google ADK plugin: ``Runner(..., plugins=[LoopGuardPlugin(budget=...)])``.

Translation only, on the guarded run (:mod:`agents_loopguard.run`), one run per ADK invocation:

* ``before_run_callback`` starts the run of the invocation's task (``task_id=``, else the ADK session id, so every
  invocation of a session, a confirmation's resume included, continues one task's counters); a task that already
  ended answers with its outcome and runs nothing; a request shape whose limits cannot be enforced is refused here;
* ``before_model_callback`` reserves each LLM call through :func:`~agents_loopguard.run.requests.model_request`
  (the request's function-calling mode is the ``tool_choice``: ``ANY`` is sent as ``NONE`` once no work remains,
  R12); a refused request is never sent: the callback answers for it and the invocation ends;
  ``after_model_callback`` / ``on_model_error_callback`` settle it;
* ``before_tool_callback`` proposes and authorizes each call (``run.propose`` / ``run.execute``): a refusal is
  the dict the model reads instead of the tool's result; ``after_tool_callback`` / ``on_tool_error_callback`` run
  the application's ``verify`` and settle the ledger;
* ``after_run_callback`` / ``on_run_error_callback`` end the task through
  :func:`~agents_loopguard.run.conclude`: read it with :meth:`LoopGuardPlugin.outcome`.

Why callbacks and not the generator's driver: ADK calls the model itself, between ``before_model_callback`` and
``after_model_callback``, so the request generator is advanced from the callbacks: ``next()`` in the first (the
attempt is reserved, its ``Send`` says the ``tool_choice``), ``send(Answer(...))`` in the second. Every rule stays
in the guarded run. ADK's client retries (``Gemini(retry_options=...)``) would happen inside one call, unseen:
such a model is refused at the start (:func:`~agents_loopguard.adk.wire.client_retries`); so the guard sends no
retry of its own either (a failed call ends the run with its verdict).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext, LlmCallsLimitExceededError
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from typing_extensions import Unpack

from ..engine.core import Guard
from ..run import (
    NO_OUTPUT,
    Answer,
    Check,
    Ending,
    Execute,
    Executed,
    GuardedRun,
    RunFieldsBase,
    RunOptions,
    Sleep,
    ToolSpec,
    adrive,
    conclude,
    conclude_now,
    perform_check_async,
)
from ..run.requests import Failed, Send, model_request
from ..values.outcome import Outcome
from . import claims, wire
from .tools import tool_spec

__all__ = ["LoopGuardPlugin"]

Steps = Generator[Any, Answer, Any]


@dataclass
class _Invocation:
    """One ADK invocation's guarded run and the requests and calls it has in flight."""

    run: GuardedRun
    session_id: str
    requests: dict[tuple[str, str], Steps] = field(default_factory=dict)
    calls: dict[str, tuple[ToolSpec, Steps]] = field(default_factory=dict)
    final_text: str | None = None
    error: BaseException | None = None
    waiting: list[dict[str, Any]] = field(default_factory=list)
    stopped_by: str | None = None


class LoopGuardPlugin(BasePlugin):
    """The guard of every invocation of a ``Runner``: each LLM call reserved, each tool execution authorized,
    verified and settled, one :class:`~agents_loopguard.Outcome` per invocation.

    ``options`` (or the :class:`~agents_loopguard.RunOptions` fields as keywords): the task's budget, store,
    policy, refusal mode... Without ``task_id`` the task is the ADK session's id. ``tools``: guard declarations
    by tool name for tools that are not :func:`~agents_loopguard.adk.guarded_tool`'s. ``reset_forced_function``:
    a function the request forces (``ANY`` with one allowed name) that already ran is sent as ``AUTO`` (ADK has no
    reset of its own; on by default). Put it first in
    ``plugins=[...]``: a plugin before it that answers a model call keeps that call from being counted.

    >>> from agents_loopguard import Budget, MemoryStore
    >>> plugin = LoopGuardPlugin(budget=Budget(model_turns=6, tool_executions=4), store=MemoryStore())
    >>> plugin.name, plugin.outcome("no-such-session") is None
    ('loopguard', True)
    """

    def __init__(
        self,
        options: RunOptions | None = None,
        *,
        tools: Mapping[str, ToolSpec] | None = None,
        name: str = "loopguard",
        reset_forced_function: bool = True,
        **fields: Unpack[RunFieldsBase],
    ) -> None:
        super().__init__(name=name)
        self.reset_forced_function = reset_forced_function
        self.options = RunOptions.merge(options, fields)
        self.tools = dict(tools or {})
        self._invocations: dict[str, _Invocation] = {}
        self._outcomes: dict[str, Outcome] = {}
        self._by_invocation: dict[str, Outcome] = {}
        self._raised: dict[str, BaseException] = {}
        self._misfits: dict[int, tuple[BaseTool, Any]] = {}

    # --- what the application reads -------------------------------------------------------------------------

    def outcome(self, session_id: str | None = None, *, invocation_id: str | None = None) -> Outcome | None:
        """The outcome of the last invocation of ``session_id`` (or of ``invocation_id``; without either, of the
        last invocation this plugin guarded), ``None`` before one ended."""
        if invocation_id is not None:
            return self._by_invocation.get(invocation_id)
        if session_id is None:
            return next(reversed(self._by_invocation.values()), None)
        return self._outcomes.get(session_id)

    def unwrapped(self, error: BaseException) -> BaseException:
        """The exception this plugin raised, out of the ``RuntimeError`` ADK's plugin manager wraps it in."""
        cause = error.__cause__
        if (
            isinstance(error, RuntimeError)
            and cause is not None
            and str(error).startswith(f"Error in plugin '{self.name}'")
        ):
            return cause
        return error

    def raised(self, session_id: str) -> BaseException | None:
        """The programming error that ended the last invocation of ``session_id`` (``stopped/fatal``)."""
        return self._raised.get(session_id)

    def guard_of(self, invocation_id: str) -> Guard | None:
        """The guard of a running invocation (``None`` once it ended)."""
        state = self._invocations.get(invocation_id)
        return state.run.guard if state is not None else None

    # --- the run -------------------------------------------------------------------------------------------

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> types.Content | None:
        options = self.options
        if options.task_id is None and options.guard is None:
            options = RunOptions.merge(options, {"task_id": invocation_context.session.id})
        answers = claims.answered_confirmations(invocation_context.session.events)
        if answers:  # a human answered ADK's tool confirmation: the stored pause continues, once
            options = claims.continue_pause(answers, options)
        run = GuardedRun.start(options, reset_forced_function=self.reset_forced_function)
        if run.guard.outcome is not None:  # the task already ended: its outcome, nothing runs
            self._record(invocation_context.invocation_id, invocation_context.session.id, run.guard.outcome)
            return types.Content(role="model", parts=[types.Part(text=_ended(run.guard.outcome))])
        root = invocation_context.agent
        if isinstance(root, BaseAgent):
            for agent_name, model, max_tokens in wire.request_shapes(root):
                run.check_enforceable(model, max_tokens, where=f"agent {agent_name!r}")
            for agent_name in wire.client_retries(root):
                raise ValueError(
                    f"agent {agent_name!r}: its model retries inside one call (retry_options), unseen by the "
                    "guard, so those requests could not be reserved: pass retry_options=None (every request the "
                    "guard sees is counted; a failed one ends the run with its verdict)"
                )
        self._invocations[invocation_context.invocation_id] = _Invocation(run, invocation_context.session.id)
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        state = self._invocations.pop(invocation_context.invocation_id, None)
        if state is None:
            return
        outcome = await adrive(conclude(state.run, self._ending(state)), perform_check_async)
        self._record(invocation_context.invocation_id, state.session_id, outcome)

    async def on_run_error_callback(self, *, invocation_context: InvocationContext, error: Exception) -> None:
        state = self._invocations.pop(invocation_context.invocation_id, None)
        if state is None:
            return
        cause = self.unwrapped(error)
        stopped_by = "max_turns" if isinstance(cause, LlmCallsLimitExceededError) else None
        ending = self._ending(state, error=cause, stopped_by=stopped_by)
        try:
            outcome: Outcome | None = await adrive(conclude(state.run, ending), perform_check_async)
        except Exception as raised:  # a programming error: the task ended stopped/fatal; ADK re-raises it
            self._raised[state.session_id] = raised
            outcome = state.run.guard.outcome
        if outcome is not None:
            self._record(invocation_context.invocation_id, state.session_id, outcome)

    async def failed(self, session_id: str, error: Exception) -> Outcome | None:
        """End the task of the running invocation of ``session_id`` with the exception that left the run (for
        per-agent callbacks, which ADK tells of no such exception); a programming error is re-raised after the task
        ended ``stopped/fatal``."""
        found = [key for key, state in self._invocations.items() if state.session_id == session_id]
        if not found:
            return None
        state = self._invocations.pop(found[-1])
        outcome = await adrive(conclude(state.run, self._ending(state, error=error)), perform_check_async)
        self._record(found[-1], session_id, outcome)
        return outcome

    def cancelled(self, session_id: str, detail: str) -> Outcome | None:
        """End the task of a cancelled invocation of ``session_id`` (``stopped/cancelled``, the calls in flight
        recorded): for the code that cancelled the task running ``Runner.run_async`` (ADK runs no callback then)."""
        found = [key for key, state in self._invocations.items() if state.session_id == session_id]
        if not found:
            return None
        invocation_id = found[-1]
        state = self._invocations.pop(invocation_id)
        outcome = conclude_now(state.run, Ending(cancelled=True, detail=detail))
        self._record(invocation_id, state.session_id, outcome)
        return outcome

    def _ending(self, state: _Invocation, **seen: Any) -> Ending:
        error = seen.pop("error", None) or state.error
        waiting = None
        if state.waiting and error is None:
            names = ", ".join(sorted({call["tool"] for call in state.waiting}))
            waiting = f"{len(state.waiting)} call(s) wait for confirmation: {names}"
        output = state.final_text if state.final_text is not None else NO_OUTPUT
        return Ending(
            output=output,
            waiting=waiting,
            store_pause=self._store_pause(state) if waiting is not None else None,
            error=error,
            stopped_by=seen.get("stopped_by"),
            result=None,
        )

    def _store_pause(self, state: _Invocation) -> Any:
        def store(_result: Any, guard: Guard) -> str | None:
            resume = {"framework": "adk", "session_id": state.session_id, "calls": state.waiting}
            outcome = guard.pause(json.dumps(resume), list(state.waiting), detail="ADK tool confirmation")
            return outcome.pause_id

        return store

    def _record(self, invocation_id: str, session_id: str, outcome: Outcome) -> None:
        self._by_invocation[invocation_id] = outcome
        self._outcomes[session_id] = outcome

    def _state(self, context: CallbackContext) -> _Invocation | None:
        return self._invocations.get(context.invocation_id)

    # --- model calls ---------------------------------------------------------------------------------------

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        state = self._state(callback_context)
        if state is None:
            return None
        limit = wire.refuses_next_call(callback_context.get_invocation_context())
        if limit is not None:  # ADK's max_llm_calls refuses this call: it is never reserved, never sent
            raise LlmCallsLimitExceededError(limit)
        offers_tools = bool(llm_request.tools_dict)
        steps = model_request(
            state.run,
            wire.requested_choice(llm_request),
            offers_tools=offers_tools,
            model=llm_request.model,
            request=lambda: wire.request_of(llm_request),
            max_output_tokens=wire.max_output_tokens(llm_request),
            usage=wire.usage_of,
        )
        try:
            effect = next(steps)
        except StopIteration as stop:  # refused before it left: never sent
            failed: Failed = stop.value
            _end_invocation(callback_context)
            verdict = failed.verdict
            return wire.refusal(f"stopped by the guard: {verdict.reason}" if verdict is not None else "stopped")
        assert isinstance(effect, Send), "the first step of a request is its reserved attempt"
        if offers_tools:
            wire.write_choice(llm_request, effect.tool_choice)
        state.requests[_request_key(callback_context)] = steps
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        state = self._state(callback_context)
        if state is None or llm_response.partial:
            return None
        steps = state.requests.pop(_request_key(callback_context), None)
        if steps is None:
            return None
        _finish(steps, Answer(llm_response))
        if not wire.has_function_calls(llm_response):
            text = wire.answer_text(llm_response)
            if text is not None:
                state.final_text = text
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        state = self._state(callback_context)
        if state is None:
            return None
        steps = state.requests.pop(_request_key(callback_context), None)
        if steps is None:
            return None
        failed = _finish(steps, Answer(error=error))
        if not isinstance(failed, Failed) or failed.verdict is None:
            return None  # not an API error: ADK raises it, and the conclusion decides
        state.error = error  # the verdict is recorded for it: the run ends with it
        _end_invocation(callback_context)
        return wire.refusal(f"the model request failed: {failed.verdict.reason}")

    # --- tool calls ----------------------------------------------------------------------------------------

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        state = self._state(tool_context)
        if state is None:
            return None
        run = state.run
        if type(tool) is BaseTool:  # ADK's stand-in for a name the agent has no tool for
            return self._answer(tool_context, run.refuse_invalid(tool.name, "read", f"unknown tool {tool.name!r}"))
        spec = self.tools.get(tool.name) or tool_spec(tool)
        waits = await self._confirmation(state, tool, spec, tool_args, tool_context)
        if waits:
            return None  # ADK's confirmation gate answers it: nothing is reserved
        call = run.propose(spec, tool.name, tool_args, tool_context.function_call_id, check=self._misfit(tool))
        if isinstance(call, Executed):
            return self._answer(tool_context, call)
        steps = run.execute(spec, call)
        effect = await _advance(steps, None)
        if isinstance(effect, Executed):
            return self._answer(tool_context, effect)
        state.calls[_call_key(tool_context)] = (spec, steps)
        return None  # authorized and reserved: ADK runs the tool once

    def _misfit(self, tool: BaseTool) -> Any:
        """The argument check of ``tool``'s function, read once per tool (the tool is kept with it)."""
        known = self._misfits.get(id(tool))
        if known is None or known[0] is not tool:
            known = self._misfits[id(tool)] = (tool, wire.misfit(tool))
        return known[1]

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        return await self._settle(tool, tool_args, tool_context, Answer(result))

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        if isinstance(error, asyncio.CancelledError):
            state = self._state(tool_context)
            entry = state.calls.pop(_call_key(tool_context), None) if state is not None else None
            if entry is not None:
                _throw(entry[1], error)  # recorded in flight
            return None
        return await self._settle(tool, tool_args, tool_context, Answer(error=error))

    async def _settle(
        self, tool: BaseTool, args: dict[str, Any], context: ToolContext, answer: Answer
    ) -> dict[str, Any] | None:
        state = self._state(context)
        entry = state.calls.pop(_call_key(context), None) if state is not None else None
        if entry is None:
            return None  # not a call this plugin authorized (a refusal it answered, the confirmation gate)
        _spec, steps = entry
        executed = await _advance(steps, answer, rerun=lambda: tool.run_async(args=args, tool_context=context))
        assert isinstance(executed, Executed), "a settled call is executed"
        if executed.message is not None or executed.verdict is not None or answer.error is not None:
            return self._answer(context, executed)
        return None if executed.output is answer.value else _as_result(executed.output)

    def _answer(self, context: ToolContext, executed: Executed) -> dict[str, Any]:
        state = self._state(context)
        if state is not None and state.run.verdict is not None:
            _end_invocation(context)
        if executed.message is not None:
            return {"error": executed.message}
        return _as_result(executed.output)

    async def _confirmation(
        self, state: _Invocation, tool: BaseTool, spec: ToolSpec, args: dict[str, Any], context: ToolContext
    ) -> bool:
        """True when ADK's confirmation gate, not the tool, answers this call (it waits for a human, or a human
        rejected it): the call is neither reserved nor executed. A call waiting is remembered for the pause."""
        check = getattr(tool, "check_require_confirmation", None)
        if check is None or await check(args, context) is not True:
            return False
        confirmation = context.tool_confirmation
        if confirmation is None:
            state.waiting.append(wire.pending_call(tool.name, spec, args, context.function_call_id))
            return True
        return not confirmation.confirmed


# --- helpers -----------------------------------------------------------------------------------------------


def _ended(outcome: Outcome) -> str:
    return f"the task already ended: {outcome.status}/{outcome.reason}"


def _request_key(context: CallbackContext) -> tuple[str, str]:
    """One model call in flight per agent and branch of an invocation (parallel agents have their own branch)."""
    return context.agent_name, context.branch or ""


def _call_key(context: ToolContext) -> str:
    return context.function_call_id or ""


def _end_invocation(context: CallbackContext) -> None:
    """The run ended: ADK calls neither the model nor a tool again (a ``LoopAgent`` leaves its loop too)."""
    context.get_invocation_context().end_invocation = True
    context.actions.escalate = True


def _finish(steps: Steps, answer: Answer) -> Any:
    """Answer a request's attempt; its result (no retry is sent from a callback: ADK made the call)."""
    try:
        effect = steps.send(answer)
    except StopIteration as stop:
        return stop.value
    steps.close()  # a retry would need a second call from inside ADK's: none is asked for (NO_RETRY)
    raise AssertionError(f"a model request without retries asked for {effect!r}")


def _throw(steps: Steps, error: BaseException) -> None:
    try:
        steps.throw(error)
    except BaseException:  # the steps re-raise what was thrown in, after recording it
        return


async def _advance(steps: Steps, answer: Answer | None, *, rerun: Any = None) -> Execute | Executed:
    """Run a call's steps up to the next :class:`Execute` ADK performs (the first) or to their end: the
    application's verify and the waits are performed here; a retry's execution runs the tool again (``rerun``)."""
    try:
        effect = next(steps) if answer is None else steps.send(answer)
        while True:
            if isinstance(effect, Execute):
                if rerun is None:
                    return effect
                try:
                    value = await rerun()
                except Exception as exc:
                    effect = steps.send(Answer(error=exc))
                else:
                    effect = steps.send(Answer(value))
                continue
            assert isinstance(effect, (Check, Sleep))
            try:
                result = Answer(await perform_check_async(effect))
            except Exception as exc:
                result = Answer(error=exc)
            effect = steps.send(result)
    except StopIteration as stop:
        executed: Executed = stop.value
        return executed


def _as_result(output: Any) -> dict[str, Any]:
    return output if isinstance(output, dict) else {"result": output}
