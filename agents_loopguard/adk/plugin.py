"""The guard as a Google ADK plugin: ``Runner(..., plugins=[LoopGuardPlugin(budget=...)])``.

Translation only, on the guarded run (:mod:`agents_loopguard.run`), one run per ADK invocation:

* ``before_run_callback`` starts the run of the invocation's task (``task_id=``, else the ADK session id, so every
  invocation of a session, a confirmation's resume included, continues one task's counters). A new message to a
  session whose last run ended with an answer continues the session's task (:mod:`agents_loopguard.ops.
  conversations`); a task the guard ended answers with its outcome and runs nothing; a request shape whose limits
  cannot be enforced is refused here. An invocation that starts inside a tool of a guarded one (``AgentTool``, a
  run a tool body starts) runs on that invocation's run: the same task, budget, stop mark and ledger; it never
  concludes the task;
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
from collections.abc import Mapping
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
from ..ops.conversations import continue_conversation, stored_outcome
from ..run import (
    Answer,
    Ending,
    GuardedRun,
    RunFieldsBase,
    RunOptions,
    ToolSpec,
    adrive,
    conclude,
    conclude_now,
    perform_check_async,
)
from ..run.conclusion import StopKind
from ..run.declarations import resolve
from ..run.listed import NotDeclared
from ..run.requests import Failed, Send, model_request
from ..store.base import PauseAlreadyResumed
from ..values.errors import InputError, StateError
from ..values.outcome import Outcome
from . import calls, claims, doors, wire
from .invocation import ACTIVE, Invocation, end_invocation, finish, request_key
from .mcp import judge_mcp_tool, listing_refusals
from .tools import GuardedFunctionTool, tool_spec

__all__ = ["LoopGuardPlugin"]


class LoopGuardPlugin(BasePlugin):
    """The guard of every invocation of a ``Runner``: each LLM call reserved, each tool execution authorized,
    verified and settled, one :class:`~agents_loopguard.Outcome` per invocation.

    ``options`` (or the :class:`~agents_loopguard.RunOptions` fields as keywords): the task's budget, store,
    policy, refusal mode... Without ``task_id`` the task is the ADK session's id: the session's budget. ``tools``
    (or ``RunOptions.tools``): the guard's declarations by tool name (:func:`~agents_loopguard.run.declare_tool`),
    for tools you do not wrap with :func:`~agents_loopguard.adk.guarded_tool` (a plain function, a ``FunctionTool``
    made elsewhere, a toolset's tools); a tool declared both ways must get the same declaration.
    ``reset_forced_function``: a function the request forces (``ANY`` with one allowed name) that already ran is
    sent as ``AUTO`` (ADK has no reset of its own; on by default). ``conversation``: a new user message to a
    session whose last run ended with an answer continues the session's task (on by default; ``False``: the task
    answers every later message with its outcome). Put it first in ``plugins=[...]``: a plugin before it that
    answers a model call keeps that call from being counted.

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
        conversation: bool = True,
        **fields: Unpack[RunFieldsBase],
    ) -> None:
        super().__init__(name=name)
        self.reset_forced_function = reset_forced_function
        self.conversation = conversation
        merged = RunOptions.merge(options, fields)
        if tools:  # the plugin's own tools= are declarations by name too (RunOptions.tools), the keywords winning
            merged = RunOptions.merge(merged, {"tools": {**merged.tools, **tools}})
        self.options = merged
        self._invocations: dict[str, Invocation] = {}
        self._outcomes: dict[str, Outcome] = {}
        self._by_invocation: dict[str, Outcome] = {}
        self._raised: dict[str, BaseException] = {}
        self._misfits: dict[int, tuple[BaseTool, Any]] = {}
        self._guard_plugin: BasePlugin | None = self
        """This plugin in ADK's plugin list (``None`` when it runs as per-agent callbacks: every plugin is first)."""

    # --- what the application reads -------------------------------------------------------------------------

    def outcome(self, session_id: str | None = None, *, invocation_id: str | None = None) -> Outcome | None:
        """The outcome of the last invocation of ``session_id`` (or of ``invocation_id``; without either, of the
        last invocation this plugin guarded), ``None`` before one ended. A session this process did not run is
        read from the store (its task's stored outcome), in any process."""
        if invocation_id is not None:
            return self._by_invocation.get(invocation_id)
        if session_id is None:
            return next(reversed(self._by_invocation.values()), None)
        known = self._outcomes.get(session_id)
        return known if known is not None else stored_outcome(self.options, session_id)

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
        """Why the last invocation of ``session_id`` ran nothing or ended with an error: the programming error that
        ended its task (``stopped/fatal``), or the refusal of an answer no stored pause waits for."""
        return self._raised.get(session_id)

    def guard_of(self, invocation_id: str) -> Guard | None:
        """The guard of a running invocation (``None`` once it ended)."""
        state = self._invocations.get(invocation_id)
        return state.run.guard if state is not None else None

    # --- the run -------------------------------------------------------------------------------------------

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> types.Content | None:
        parent = ACTIVE.get()
        if parent is not None and parent.nests():
            return self._nest(invocation_context, parent)
        session = invocation_context.session
        self._raised.pop(session.id, None)
        root = invocation_context.agent if isinstance(invocation_context.agent, BaseAgent) else None
        if root is not None:  # before the task is touched: a refused run leaves nothing behind
            self._refuse_doors(root, invocation_context)
        options = self.options
        if options.task_id is None and options.guard is None:
            options = RunOptions.merge(options, {"task_id": session.id})
        answers = claims.answered_confirmations(session.events)
        if answers:  # a human answered ADK's tool confirmation: the stored pause continues, once
            try:
                options = claims.continue_pause(answers, options)
            except (InputError, StateError) as refused:
                return self._refused(invocation_context, options, refused)
        elif self.conversation:  # a new message: a session whose last run answered goes on
            continue_conversation(options, who=_who(options, invocation_context), why=f"a new message in {session.id}")
        run = GuardedRun.start(options, reset_forced_function=self.reset_forced_function)
        if run.guard.outcome is not None:  # the task ended: its outcome, nothing runs
            self._record(invocation_context.invocation_id, session.id, run.guard.outcome)
            return _said(_ended(run.guard.outcome))
        if root is not None:
            self._check(run, root)
            _admit_outside(run, root)
            refusals = await listing_refusals(run, root, invocation_context, self.options.tools)
            if refusals:  # an MCP server lists tools that may change the world and nobody declared
                raise ValueError("; ".join(refusals))
        state = Invocation(run, session.id)
        self._invocations[invocation_context.invocation_id] = state
        ACTIVE.set(state)
        return None

    def _nest(self, context: InvocationContext, parent: Invocation) -> types.Content | None:
        """An invocation started inside a tool of ``parent`` (``AgentTool``, a run a tool body starts): it runs on
        the parent's run; a run the guard or ADK already ended (or stopped by its mark) runs nothing."""
        stopped = parent.run.checkpoint()
        why = str(stopped.reason) if stopped is not None else parent.stopping()
        if why is not None:
            return _said(f"stopped by the guard: {why}")
        if isinstance(context.agent, BaseAgent):
            self._refuse_doors(context.agent, None)
            self._check(parent.run, context.agent)
            _admit_outside(parent.run, context.agent)
        state = Invocation(parent.run, context.session.id, parent=parent)
        self._invocations[context.invocation_id] = state
        ACTIVE.set(state)
        return None

    def _check(self, run: GuardedRun, root: BaseAgent) -> None:
        """Refuse (``ValueError``) a request shape whose limits the task could not enforce in a run of ``root``."""
        for agent_name, model, max_tokens in wire.request_shapes(root):
            run.check_enforceable(model, max_tokens, where=f"agent {agent_name!r}")

    def _refuse_doors(self, root: BaseAgent, context: InvocationContext | None) -> None:
        """Refuse (``ValueError``) before anything runs what the guard could not reach in a run of ``root``: a tool
        declared twice differently, a door no callback sees (:mod:`~agents_loopguard.adk.doors`: client retries,
        hosted tools and code executors not opted out, a live run, a plugin before the guard that answers calls)."""
        declared = self.options.tools
        for tool in wire.listed_tools(root):
            resolve(tool.name, tool_spec(tool), declared)
        for where in doors.client_retries(root):
            raise ValueError(
                f"{where}, unseen by the guard, so those requests could not be reserved: pass retry_options=None "
                "(every request the guard sees is counted; a failed one ends the run with its verdict)"
            )
        for refused in doors.unreachable_tools(root, self.options.unguarded):
            raise ValueError(refused)
        if context is None:
            return
        live = doors.live_run(context)
        if live is not None:
            raise ValueError(
                f"{live} carries many model turns and tool calls on one connection, which the guard cannot reserve "
                "one by one: run the agent with Runner.run_async (RunConfig(streaming_mode=StreamingMode.SSE) "
                "streams, guarded)"
            )
        early = doors.early_plugins(context.plugin_manager.plugins, self._guard_plugin)
        if early:
            raise ValueError(
                f"plugin(s) {early} listed before the guard can answer model or tool calls, and ADK then skips the "
                f"plugins after them, so calls would go unreserved or unsettled: put the {self.name!r} plugin first "
                "in plugins=[...]"
            )

    def _refused(self, context: InvocationContext, options: RunOptions, refused: Exception) -> types.Content:
        """A confirmation's answer that continues no pause: runs nothing. The same answer delivered again (ADK
        resumes at least once) is a quiet no-op answered with the task's outcome; any other is refused, its
        reason kept for :meth:`raised` (``run_guarded`` raises it)."""
        session_id = context.session.id
        outcome = stored_outcome(options) if isinstance(refused, PauseAlreadyResumed) else None
        if outcome is not None:
            self._record(context.invocation_id, session_id, outcome)
            return _said(f"already answered: {outcome.status}/{outcome.reason}")
        self._raised[session_id] = refused
        return _said(f"refused: {refused}")

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        state = self._leave(invocation_context)
        if state is None or state.parent is not None:
            return  # a nested invocation never concludes its parent's task
        outcome = await adrive(conclude(state.run, self._ending(state)), perform_check_async)
        self._record(invocation_context.invocation_id, state.session_id, outcome)

    async def on_run_error_callback(self, *, invocation_context: InvocationContext, error: Exception) -> None:
        state = self._leave(invocation_context)
        if state is None or state.parent is not None:
            return  # the error leaves the nested run through the parent's tool, which settles it
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

    def _leave(self, context: InvocationContext) -> Invocation | None:
        state = self._invocations.pop(context.invocation_id, None)
        if state is not None:
            state.ended = True
            ACTIVE.set(state.parent)
        return state

    def _running(self, session_id: str) -> str | None:
        """The running (outermost) invocation of ``session_id``."""
        found = [key for key, s in self._invocations.items() if s.session_id == session_id and s.parent is None]
        return found[-1] if found else None

    async def failed(self, session_id: str, error: Exception) -> Outcome | None:
        """End the task of the running invocation of ``session_id`` with the exception that left the run (for
        per-agent callbacks, which ADK tells of no such exception); a programming error is re-raised after the task
        ended ``stopped/fatal``."""
        invocation_id = self._running(session_id)
        if invocation_id is None:
            return None
        state = self._invocations.pop(invocation_id)
        state.ended = True
        outcome = await adrive(conclude(state.run, self._ending(state, error=error)), perform_check_async)
        self._record(invocation_id, session_id, outcome)
        return outcome

    def cancelled(self, session_id: str, detail: str) -> Outcome | None:
        """End the task of a cancelled invocation of ``session_id`` (``stopped/cancelled``, the calls in flight
        recorded): for the code that cancelled the task running ``Runner.run_async`` (ADK runs no callback then)."""
        invocation_id = self._running(session_id)
        if invocation_id is None:
            return None
        state = self._invocations.pop(invocation_id)
        state.ended = True
        outcome = conclude_now(state.run, Ending(cancelled=True, detail=detail))
        self._record(invocation_id, state.session_id, outcome)
        return outcome

    def _ending(self, state: Invocation, **seen: Any) -> Ending:
        error = seen.pop("error", None) or state.error
        waiting = None
        if state.waiting and error is None:
            names = ", ".join(sorted({call["tool"] for call in state.waiting}))
            waiting = f"{len(state.waiting)} call(s) wait for confirmation: {names}"
        stopped_by: StopKind | None = seen.get("stopped_by") or ("max_turns" if state.halted is not None else None)
        return Ending(
            output=state.final_text,  # ADK ended the run: its last answer (none after exit_loop, a skipped summary)
            waiting=waiting,
            store_pause=self._store_pause(state) if waiting is not None else None,
            error=error,
            stopped_by=stopped_by,
            detail=state.halted,
            result=None,
        )

    def _store_pause(self, state: Invocation) -> Any:
        def store(_result: Any, guard: Guard) -> str | None:
            calls = [call["call_id"] for call in state.waiting]  # by id: the calls themselves are the pause's own
            resume = {"framework": "adk", "session_id": state.session_id, "calls": calls}
            outcome = guard.pause(json.dumps(resume), list(state.waiting), detail="ADK tool confirmation")
            return outcome.pause_id

        return store

    def _record(self, invocation_id: str, session_id: str, outcome: Outcome) -> None:
        self._by_invocation[invocation_id] = outcome
        self._outcomes[session_id] = outcome

    def _state(self, context: CallbackContext) -> Invocation | None:
        return self._invocations.get(context.invocation_id)

    # --- model calls ---------------------------------------------------------------------------------------

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        state = self._state(callback_context)
        if state is None:
            return None
        limit = wire.refuses_next_call(callback_context.get_invocation_context())
        if limit is not None and state.root.halted is None:  # ADK's max_llm_calls: the call is never reserved
            state.root.halted = limit
        stopping = state.stopping()
        if stopping is not None:  # the task's run ends here: nothing is sent
            end_invocation(callback_context)
            return wire.refusal(f"stopped: {stopping}")
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
            end_invocation(callback_context)
            verdict = failed.verdict
            return wire.refusal(f"stopped by the guard: {verdict.reason}" if verdict is not None else "stopped")
        assert isinstance(effect, Send), "the first step of a request is its reserved attempt"
        if offers_tools:
            wire.write_choice(llm_request, effect.tool_choice)
        state.requests[request_key(callback_context)] = steps
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        state = self._state(callback_context)
        if state is None or llm_response.partial:
            return None
        steps = state.requests.pop(request_key(callback_context), None)
        if steps is None:
            return None
        finish(steps, Answer(llm_response))
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
        steps = state.requests.pop(request_key(callback_context), None)
        if steps is None:
            return None
        failed = finish(steps, Answer(error=error))
        if not isinstance(failed, Failed) or failed.verdict is None:
            return None  # not an API error: ADK raises it, and the conclusion decides
        state.root.error = error  # the verdict is recorded for it: the task's run ends with it
        end_invocation(callback_context)
        return wire.refusal(f"the model request failed: {failed.verdict.reason}")

    # --- tool calls ----------------------------------------------------------------------------------------

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        state = self._state(tool_context)
        if state is None:
            return None
        stopping = state.stopping()
        if stopping is not None:
            end_invocation(tool_context)
            return {"error": f"stopped: {stopping}"}
        run = state.run
        if type(tool) is BaseTool:  # ADK's stand-in for a name the agent has no tool for
            return calls.answer(
                state, tool_context, run.refuse_invalid(tool.name, "read", f"unknown tool {tool.name!r}")
            )
        judged = judge_mcp_tool(run, tool, self.options.tools)  # an MCP tool: declared, or judged by its annotations
        if isinstance(judged, NotDeclared):
            return calls.answer(state, tool_context, run.refuse_undeclared(judged))
        spec = judged or run.declaration(tool.name, tool_spec(tool))  # its wrapper's, or by name (RunOptions.tools)
        if await self._confirmation(state, tool, spec, tool_args, tool_context):
            return None  # ADK's confirmation gate answers it: nothing is reserved
        if isinstance(tool, GuardedFunctionTool):
            return None  # it reserves itself at its body, with the arguments the body gets
        return await calls.begin_call(state, tool, spec, tool_args, tool_context, self._misfit(tool))

    def _misfit(self, tool: BaseTool) -> Any:
        """The argument check of ``tool``'s function, read once per tool (the tool is kept with it)."""
        known = self._misfits.get(id(tool))
        if known is None or known[0] is not tool:
            known = self._misfits[id(tool)] = (tool, wire.misfit(tool))
        return known[1]

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        state = self._state(tool_context)
        return await calls.settle_call(state, tool, tool_args, tool_context, Answer(result)) if state else None

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        state = self._state(tool_context)
        if state is None:
            return None
        if isinstance(error, asyncio.CancelledError):
            calls.cancel_call(state, tool_context, error)
            return None
        return await calls.settle_call(state, tool, tool_args, tool_context, Answer(error=error))

    async def _confirmation(
        self, state: Invocation, tool: BaseTool, spec: ToolSpec, args: dict[str, Any], context: ToolContext
    ) -> bool:
        """True when ADK's confirmation gate, not the tool, answers this call (it waits for a human, or a human
        rejected it): the call is neither reserved nor executed. A call waiting is remembered for the pause."""
        check = getattr(tool, "check_require_confirmation", None)
        if check is None or await check(args, context) is not True:
            return False
        confirmation = context.tool_confirmation
        if confirmation is None:
            secrets = state.run.guard.secrets
            state.waiting.append(wire.pending_call(tool.name, spec, args, context.function_call_id, secrets=secrets))
            return True
        return not confirmation.confirmed


# --- helpers -----------------------------------------------------------------------------------------------


def _ended(outcome: Outcome) -> str:
    return f"the task already ended: {outcome.status}/{outcome.reason}"


def _said(text: str) -> types.Content:
    """What an invocation that runs nothing answers."""
    return types.Content(role="model", parts=[types.Part(text=text)])


def _admit_outside(run: GuardedRun, root: BaseAgent) -> None:
    """Record (once per run) each hosted tool and code executor the application opted out (``unguarded=``):
    :meth:`~agents_loopguard.run.GuardedRun.admit`, after :meth:`LoopGuardPlugin._refuse_doors` refused the rest."""
    for name, what in doors.outside_tools(root):
        run.admit(name, what, "remove it")


def _who(options: RunOptions, context: InvocationContext) -> str:
    return options.who or f"{context.session.user_id} (ADK session message)"
