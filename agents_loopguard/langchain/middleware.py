"""The LangChain v1 adapter: an ``AgentMiddleware`` for ``langchain.agents.create_agent``, translation only.

Every rule is the guarded run's (:mod:`agents_loopguard.run`); this module maps LangChain's hooks onto it:

* ``before_agent`` starts the run under the task (the LangGraph thread by default) and ends at once a task that
  already ended;
* ``wrap_model_call`` answers for the model once the guard decided (a message without tool calls: the agent
  ends, nothing is sent), else sends each attempt through :func:`~agents_loopguard.run.requests.model_request`: reserved
  first, with the guard's ``tool_choice`` (R12), the chat model's client retries taken over (:mod:`.models`);
* ``wrap_tool_call`` proposes each call, executes it once through the handler, verifies and settles it; a refusal
  is the ``ToolMessage`` the model reads;
* ``after_agent`` concludes: the task's one :class:`~agents_loopguard.Outcome` goes into the state
  (``result["loopguard"]``, read with :meth:`LoopGuardMiddleware.outcome` or :func:`outcome_of`).

Approvals: :meth:`LoopGuardMiddleware.human_in_the_loop` (:mod:`.approvals`).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse, hook_config
from langchain.agents.middleware.types import OmitFromInput
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel, ValidationError
from typing_extensions import NotRequired, Unpack

from ..run import (
    NO_OUTPUT,
    Check,
    Ending,
    Execute,
    Executed,
    GuardedRun,
    Sleep,
    ToolSpec,
    adrive,
    conclude,
    conclude_now,
    drive,
    model_request,
    perform_check,
    perform_check_async,
    within_deadline,
)
from ..run.requests import Failed, Send
from ..run.retry import RetryPolicy
from ..values.outcome import Outcome, RecoveryRecord
from .models import client_retries, model_name, output_bound, single_attempt, usage_of
from .options import LangChainFields, LangChainOptions

__all__ = ["LoopGuardMiddleware", "LoopGuardState", "outcome_of"]

STATE_KEY = "loopguard"
ENDED = "loopguard_ended"
"""``AIMessage.response_metadata`` key of the message that stands for a model request the guard refused."""


class LoopGuardState(AgentState[Any]):
    """The agent state with the guard's entry: ``{"task_id": ..., "outcome": RecoveryRecord dict or None}``."""

    loopguard: NotRequired[Annotated[dict[str, Any], OmitFromInput]]


@dataclass
class Scope:
    """One invocation's guarded run and what the hooks tell each other."""

    run: GuardedRun
    task_id: str
    models: dict[int, tuple[Any, str | None, int | None, RetryPolicy]] = field(default_factory=dict)
    """id(chat model) -> (the model, its name, its output bound, its retries), checked once per run."""
    error: BaseException | None = None
    """The model error that ended the run (its verdict recorded by the run), for the conclusion."""
    invalid: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Calls whose arguments were not JSON (LangChain's ``invalid_tool_calls``), by call id: (tool, why); refused
    in their turn among the response's calls."""
    stopped_by: Any = None
    """The framework's own stop (``model_behavior``: the chat model could not read the model's answer)."""
    turns: threading.Condition = field(default_factory=threading.Condition)
    """LangGraph runs the calls of one response on threads in a sync run: the run takes them one at a time, in the
    response's order (``served``: the call ids it took)."""
    served: set[str] = field(default_factory=set)
    outcome: Outcome | None = None


def outcome_of(result: Mapping[str, Any]) -> Outcome | None:
    """The task's outcome an agent's result (its final state) carries, or ``None`` (the run did not end here:
    an approval interrupt, read it with :meth:`LoopGuardMiddleware.outcome`).

    >>> outcome_of({"messages": []}) is None
    True
    """
    entry = result.get(STATE_KEY) if isinstance(result, Mapping) else None
    record = entry.get("outcome") if isinstance(entry, Mapping) else None
    return RecoveryRecord.from_json(dict(record)).to_outcome() if isinstance(record, Mapping) else None


def _configurable() -> dict[str, Any]:
    try:
        return dict(get_config().get("configurable") or {})
    except RuntimeError:  # outside a graph
        return {}


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)


def _final_output(state: Mapping[str, Any]) -> Any:
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    if isinstance(last, AIMessage) and not last.tool_calls and not last.response_metadata.get(ENDED):
        return _text(last)
    return NO_OUTPUT


def _ended_message(scope: Scope) -> AIMessage:
    verdict = scope.run.verdict
    why = f"{verdict.status}/{verdict.reason}" if verdict is not None else "the task already ended"
    return AIMessage(content="", name="loopguard", response_metadata={ENDED: why})


def _refusal(call: Mapping[str, Any], message: str) -> ToolMessage:
    return ToolMessage(content=message, name=call.get("name"), tool_call_id=call.get("id") or "", status="error")


_TURN_WAIT = 30.0
"""Seconds a call waits for the calls before it in its response (one that never comes: the others go on)."""


def _preceding(state: Mapping[str, Any], call_id: str) -> list[str]:
    """The unanswered calls before ``call_id`` in the response that made it (only the messages after that response
    can answer them: the history before it is never read, so a call costs the same at any length of history).

    >>> from langchain_core.messages import AIMessage, ToolMessage
    >>> calls = [{"name": "f", "args": {}, "id": i} for i in ("a", "b", "c")]
    >>> _preceding({"messages": [AIMessage("", tool_calls=calls), ToolMessage("x", tool_call_id="a")]}, "c")
    ['b']
    """
    messages = state.get("messages") or [] if isinstance(state, Mapping) else []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage):
            ids = [str(c.get("id")) for c in message.tool_calls]
            if call_id in ids:
                before = ids[: ids.index(call_id)]
                if not before:
                    return []
                answered = {str(m.tool_call_id) for m in messages[index + 1 :] if isinstance(m, ToolMessage)}
                return [i for i in before if i not in answered]
    return []


def _schema_check(tool: Any) -> Callable[[dict[str, Any]], str | None] | None:
    """The tool's own argument schema, checked before the call is authorized (``invalid_call``)."""
    schema = getattr(tool, "tool_call_schema", None)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return None

    def check(args: dict[str, Any]) -> str | None:
        try:
            schema.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return f"the arguments do not fit {tool.name}'s schema: {problems}"
        return None

    return check


class LoopGuardMiddleware(AgentMiddleware[LoopGuardState, Any, Any]):
    """Guards every model attempt and tool call of a ``create_agent`` agent against one task's budget.

    >>> from langchain.agents import create_agent
    >>> from agents_loopguard import Budget, MemoryStore
    >>> from agents_loopguard.langchain.testing import ScriptedChatModel
    >>> guard = LoopGuardMiddleware(budget=Budget(model_turns=3, tool_executions=2), store=MemoryStore())
    >>> agent = create_agent(ScriptedChatModel(["Nothing to do."]), tools=[], middleware=[guard])
    >>> result = agent.invoke({"messages": [("user", "hi")]})
    >>> outcome = guard.outcome(result)
    >>> outcome.status, outcome.reason, outcome.used.models
    (<Status.PARTIAL: 'partial'>, <Reason.UNVERIFIED_FINAL: 'unverified_final'>, 1)
    """

    state_schema = LoopGuardState

    def __init__(self, options: LangChainOptions | None = None, **fields: Unpack[LangChainFields]) -> None:
        super().__init__()
        self.options = LangChainOptions.merge(options, fields)
        self._scopes: dict[str, Scope] = {}
        self._outcomes: dict[str, Outcome] = {}
        """The last outcome of each task this middleware concluded (with its value and result), by task id."""
        self.tools = []

    @property
    def name(self) -> str:
        return "LoopGuardMiddleware"

    # --- the run of one invocation ---------------------------------------------------------------------------

    def _task_id(self, state: Mapping[str, Any] | None) -> str:
        entry = (state or {}).get(STATE_KEY)
        if isinstance(entry, Mapping) and isinstance(entry.get("task_id"), str):
            return str(entry["task_id"])
        if self.options.guard is not None:
            return self.options.guard.task_id
        configurable = _configurable()
        for key in ("task_id", "thread_id"):
            if isinstance(configurable.get(key), str) and configurable[key]:
                return str(configurable[key])
        return self.options.task_id or f"langchain-{uuid.uuid4().hex[:16]}"

    def start(self, task_id: str, options: LangChainOptions | None = None) -> Scope:
        """A new guarded run of ``task_id`` for this invocation (``options``: a claimed pause's)."""
        opts = options or self.options
        if opts.guard is None and opts.task_id != task_id:
            opts = LangChainOptions.merge(opts, {"task_id": task_id})
        scope = self._scopes[task_id] = Scope(
            GuardedRun.start(opts, reset_forced_function=opts.reset_forced_function), task_id
        )
        return scope

    def scope(self, state: Mapping[str, Any] | None) -> Scope:
        """The run of the invocation that ``state`` belongs to (started here when this process has none: a resume
        in another process continues the task from the store)."""
        task_id = self._task_id(state)
        found = self._scopes.get(task_id)
        return found if found is not None else self.start(task_id)

    def outcome(self, result: Mapping[str, Any]) -> Outcome | None:
        """The task's outcome for an agent's result, as this process concluded it (with its ``value``), else the
        one the result carries (:func:`outcome_of`); after an approval interrupt, the ``needs_human/approval``
        outcome with its ``pause_id``."""
        entry = result.get(STATE_KEY) if isinstance(result, Mapping) else None
        task_id = entry.get("task_id") if isinstance(entry, Mapping) else None
        if isinstance(task_id, str):
            if task_id in self._outcomes:
                return self._outcomes[task_id]
            found = self._scopes.get(task_id)
            if found is not None and found.run.guard.outcome is not None:
                return found.run.guard.outcome
        return outcome_of(result)

    def _entry(self, scope: Scope) -> dict[str, Any]:
        outcome = scope.outcome or scope.run.guard.outcome
        return {"task_id": scope.task_id, "outcome": outcome.record().to_dict() if outcome is not None else None}

    # --- the agent's start and end ---------------------------------------------------------------------------

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Start this invocation's run; a task that already ended returns its outcome and runs nothing."""
        scope = self.start(self._task_id(None))  # a new invocation: the thread's task (or a task of its own)
        update: dict[str, Any] = {STATE_KEY: self._entry(scope)}
        if scope.run.guard.outcome is not None:
            scope.outcome = scope.run.guard.outcome
            update["jump_to"] = "end"
        return update

    def after_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Conclude the run: the task's one outcome, stored and carried in the state."""
        scope = self.scope(state)
        if scope.outcome is None:
            scope.outcome = drive(conclude(scope.run, self._ending(scope, state)), perform_check)
        return self._ended(scope)

    async def aafter_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        scope = self.scope(state)
        if scope.outcome is None:
            scope.outcome = await adrive(conclude(scope.run, self._ending(scope, state)), perform_check_async)
        return self._ended(scope)

    def release(self, scope: Scope) -> None:
        """Forget an invocation's run (its outcome stays readable): the next hook of its task starts from the
        store, as a resume in another process would."""
        self._scopes.pop(scope.task_id, None)
        if scope.outcome is not None:
            if len(self._outcomes) > 1024:
                self._outcomes.clear()
            self._outcomes[scope.task_id] = scope.outcome

    def _ended(self, scope: Scope) -> dict[str, Any]:
        self.release(scope)
        return {STATE_KEY: self._entry(scope)}

    def _ending(self, scope: Scope, state: Mapping[str, Any]) -> Ending:
        return Ending(output=_final_output(state), error=scope.error, stopped_by=scope.stopped_by, result=dict(state))

    # --- model requests --------------------------------------------------------------------------------------

    def _model_steps(self, scope: Scope, request: ModelRequest[Any]) -> Any:
        run, model = scope.run, request.model
        facts = scope.models.get(id(model))
        if facts is None or facts[0] is not model or request.model_settings:
            name, bound = model_name(model), output_bound(model, request.model_settings)
            run.check_enforceable(name, bound, where="the agent's chat model")
            retry = self.options.model_retry or RetryPolicy(max_retries=client_retries(model))
            facts = scope.models[id(model)] = (model, name, bound, retry)
        _, name, bound, retry = facts
        requested = request.tool_choice if request.tool_choice is not None else self.options.tool_choice

        def prompt() -> dict[str, Any]:  # what the request is made of, for the input estimate
            offered = [getattr(t, "name", t) for t in request.tools]
            messages = [m.content for m in request.messages]
            system = request.system_message.content if request.system_message is not None else None
            return {"instructions": system, "input": messages, "tools": offered}

        return model_request(
            run,
            requested,
            offers_tools=bool(request.tools),
            model=name,
            request=prompt,
            max_output_tokens=bound,
            retry=retry,
            usage=usage_of,
        )

    @staticmethod
    def _attempt(request: ModelRequest[Any], send: Send) -> ModelRequest[Any]:
        model = single_attempt(request.model, send.timeout)
        if send.tool_choice == request.tool_choice and model is request.model:
            return request
        return request.override(tool_choice=send.tool_choice, model=model)

    def _answered(self, scope: Scope, response: Any) -> Any:
        """The model's response, its calls with arguments that are not JSON refused (``invalid_call``) and routed
        to the tools, where the model reads the refusal."""
        if isinstance(response, Failed):
            if isinstance(response.error, ValidationError):  # the chat model could not read the model's answer
                if scope.run.done is None:  # (after validated done it was only the final answer)
                    scope.stopped_by, scope.error = "model_behavior", response.error
            elif response.verdict is None:  # not an API error: the task ends stopped/fatal, the error goes on
                conclude_now(scope.run, Ending(error=response.error))
            else:
                scope.error = response.error
            return ModelResponse(result=[_ended_message(scope)])
        messages = getattr(response, "result", None)
        if not messages or not isinstance(messages[0], AIMessage) or not messages[0].invalid_tool_calls:
            return response
        message = messages[0]
        routed = list(message.tool_calls)
        for bad in message.invalid_tool_calls:
            call_id = bad.get("id") or f"invalid-{len(scope.invalid)}"
            name = bad.get("name") or ""
            detail = f"the arguments for {name!r} are not a JSON object ({bad.get('error') or 'unreadable'})"
            scope.invalid[call_id] = (name, detail)
            routed.append({"name": name, "args": {}, "id": call_id, "type": "tool_call"})
        fixed = message.model_copy(update={"tool_calls": routed, "invalid_tool_calls": []})
        return ModelResponse(result=[fixed, *messages[1:]], structured_response=response.structured_response)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Any:
        """Each attempt reserved before it leaves, sent once with the guard's ``tool_choice``."""
        scope = self.scope(request.state)
        if scope.run.verdict is not None or scope.run.guard.outcome is not None:  # decided: the model is not asked
            return ModelResponse(result=[_ended_message(scope)])

        def perform(effect: Any) -> Any:
            if isinstance(effect, Send):
                return handler(self._attempt(request, effect))
            return perform_check(effect)

        try:
            response = drive(self._model_steps(scope, request), perform)
        except Exception as exc:  # a programming error before the request: the task ends stopped/fatal
            conclude_now(scope.run, Ending(error=exc))
            raise
        except BaseException as exc:
            conclude_now(scope.run, Ending(cancelled=True, detail=f"{type(exc).__name__} during a model request"))
            raise
        return self._answered(scope, response)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> Any:
        scope = self.scope(request.state)
        if scope.run.verdict is not None or scope.run.guard.outcome is not None:  # decided: the model is not asked
            return ModelResponse(result=[_ended_message(scope)])

        async def perform(effect: Any) -> Any:
            if isinstance(effect, Send):
                return await within_deadline(handler(self._attempt(request, effect)), effect.timeout)
            return await perform_check_async(effect)

        try:
            response = await adrive(self._model_steps(scope, request), perform)
        except Exception as exc:
            conclude_now(scope.run, Ending(error=exc))
            raise
        except BaseException as exc:
            conclude_now(scope.run, Ending(cancelled=True, detail=f"{type(exc).__name__} during a model request"))
            raise
        return self._answered(scope, response)

    # --- tool calls --------------------------------------------------------------------------------------------

    def _proposal(self, scope: Scope, request: ToolCallRequest) -> tuple[ToolSpec, Any]:
        call, run = request.tool_call, scope.run
        name, call_id = call.get("name") or "", call.get("id")
        spec = self.options.tools.get(name) or ToolSpec(declared=False)
        if call_id in scope.invalid:
            return spec, run.refuse_invalid(name, spec.kind, scope.invalid.pop(call_id)[1])
        if request.tool is None:
            return spec, run.refuse_invalid(name, spec.kind, f"unknown tool {name!r}")
        return spec, run.propose(spec, name, call.get("args") or {}, call_id, check=_schema_check(request.tool))

    @staticmethod
    def _message(request: ToolCallRequest, executed: Executed, sent: list[Any]) -> ToolMessage | Command[Any]:
        if executed.message is not None:
            return _refusal(request.tool_call, executed.message)
        if sent:
            reply: ToolMessage | Command[Any] = sent[-1]
            return reply
        output = executed.output  # a committed write's stored output: never executed again
        text = output if isinstance(output, str) else str(output)
        return ToolMessage(content=text, name=request.tool_call.get("name"), tool_call_id=request.tool_call["id"])

    @staticmethod
    def _executing(request: ToolCallRequest, effect: Execute) -> ToolCallRequest:
        return request.override(tool_call={**request.tool_call, "args": dict(effect.call.args)})

    @staticmethod
    def _output(reply: Any) -> Any:
        """What ``verify(args, output)`` receives: the text the model reads (a ``Command``'s own object)."""
        return reply.content if isinstance(reply, ToolMessage) else reply

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        """Authorize, execute once, verify and settle one call; a refusal is the ``ToolMessage`` the model reads."""
        scope = self.scope(request.state)
        call_id = str(request.tool_call.get("id"))
        before = _preceding(request.state, call_id)
        with scope.turns:
            scope.turns.wait_for(lambda: all(p in scope.served for p in before), timeout=_TURN_WAIT)
            try:
                return self._tool_call(scope, request, handler)
            finally:
                scope.served.add(call_id)
                scope.turns.notify_all()

    def _tool_call(
        self, scope: Scope, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        spec, proposed = self._proposal(scope, request)
        if isinstance(proposed, Executed):
            return _refusal(request.tool_call, proposed.message or "refused")
        sent: list[Any] = []

        def perform(effect: Any) -> Any:
            if isinstance(effect, Execute):
                sent.append(handler(self._executing(request, effect)))
                return self._output(sent[-1])
            if isinstance(effect, Sleep):
                time.sleep(effect.seconds)
                return None
            return perform_check(effect)

        try:
            executed = drive(scope.run.execute(spec, proposed), perform)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                conclude_now(scope.run, Ending(cancelled=True, detail=f"{type(exc).__name__} during a tool call"))
            raise
        return self._message(request, executed, sent)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        scope = self.scope(request.state)
        spec, proposed = self._proposal(scope, request)
        if isinstance(proposed, Executed):
            return _refusal(request.tool_call, proposed.message or "refused")
        sent: list[Any] = []

        async def perform(effect: Any) -> Any:
            if isinstance(effect, Execute):
                sent.append(await within_deadline(handler(self._executing(request, effect)), effect.timeout))
                return self._output(sent[-1])
            if isinstance(effect, Check):
                value = effect.verify(*effect.args)
                return await value if inspect.isawaitable(value) else value
            return await perform_check_async(effect)

        try:
            executed = await adrive(scope.run.execute(spec, proposed), perform)
        except asyncio.CancelledError:
            conclude_now(scope.run, Ending(cancelled=True, detail="the run was cancelled during a tool call"))
            raise
        except BaseException as exc:
            if not isinstance(exc, Exception):
                conclude_now(scope.run, Ending(cancelled=True, detail=f"{type(exc).__name__} during a tool call"))
            raise
        return self._message(request, executed, sent)

    # --- approvals -------------------------------------------------------------------------------------------

    def human_in_the_loop(self, interrupt_on: Mapping[str, Any], **options: Any) -> Any:
        """LangChain's ``HumanInTheLoopMiddleware`` (same arguments), with its interrupts stored as pauses of this
        guard's task and its ``Command(resume=...)`` continuing the same task once (see :mod:`.approvals`)."""
        from .approvals import GuardedHumanInTheLoop

        return GuardedHumanInTheLoop(self, interrupt_on=dict(interrupt_on), **options)
