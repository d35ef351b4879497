"""The LangChain v1 adapter: an ``AgentMiddleware`` for ``langchain.agents.create_agent``, translation only.

Every rule is the guarded run's (:mod:`agents_loopguard.run`); this module maps LangChain's hooks onto it:

* ``before_agent`` starts the run under the thread's task (one task per thread, its budget bounding the whole
  conversation): a new message after a run that ended with an answer reopens it by a recorded ``message``
  transition, its counters going on (:mod:`agents_loopguard.ops.conversations`, as ADK's sessions); a task the
  guard ended (a budget, a loop, a pause waiting, an unknown write, an operator's stop) answers why and runs
  nothing;
* ``wrap_model_call`` answers for the model once the guard decided (a message that says why: the agent ends,
  nothing is sent), else hands the request down with its chat model guarded at the body (:mod:`.bodies`): every
  call of the model, by any layer, is a request of the guarded run, each attempt reserved before it leaves, with
  the guard's ``tool_choice`` (R12) and the chat model's client retries taken over (:mod:`.models`);
* ``wrap_tool_call`` hands the call down with its tool guarded at the body: each run of the body is proposed,
  reserved, executed once, verified and settled; a refusal is the ``ToolMessage`` the model reads;
* ``after_agent`` concludes: the task's one :class:`~agents_loopguard.Outcome` goes into the state
  (``result["loopguard"]``, read with :meth:`LoopGuardMiddleware.outcome` or :func:`outcome_of`).

Approvals: :meth:`LoopGuardMiddleware.human_in_the_loop` (:mod:`.approvals`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse, hook_config
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel, ValidationError
from typing_extensions import Unpack

from ..ops.conversations import continue_conversation
from ..run import (
    Ending,
    Executed,
    GuardedRun,
    ToolSpec,
    adrive,
    conclude,
    conclude_now,
    drive,
    model_request,
    perform_check,
    perform_check_async,
)
from ..run.declarations import parse_arguments
from ..run.requests import Failed
from ..run.retry import RetryPolicy
from ..run.state import refusal_message
from ..values.outcome import Outcome, RecoveryRecord
from .approvals import GuardedHumanInTheLoop, pause_record
from .bodies import GuardedTool, ModelBody, ToolBody, chat_model_in, guarded_model
from .models import client_retries, model_name, output_bound, usage_of
from .options import LangChainFields, LangChainOptions
from .scope import PARENT, STATE_KEY, LoopGuardState, Scope, configurable, ended_message, final_output, refusal

__all__ = ["LoopGuardMiddleware", "LoopGuardState", "outcome_of"]

_PLAIN_REVIEW = (
    "a HumanInTheLoopMiddleware beside LoopGuardMiddleware reviewed these calls outside the guard (its pause and "
    "the human's decisions are not stored with the task, and its checkpoint could be resumed twice): use "
    "guard.human_in_the_loop(interrupt_on=...) in its place"
)
_HOSTED_FIX = "Do its work in a @tool the agent runs (guarded at its body)"
_REVIEWED = "hitl_edited_tool_calls"
"""The state key ``HumanInTheLoopMiddleware`` writes whenever it reviewed a model turn's calls (batched mode)."""
_UNGUARDED_ANSWER = (
    "the model request was answered without the agent's chat model: a middleware listed after "
    "LoopGuardMiddleware replaced the model or answered itself, so its request could not be reserved; list it "
    "before the guard (the guard then guards the model it hands down)"
)


def outcome_of(result: Any) -> Outcome | None:
    """The task's outcome an agent's result carries, in any process: the final state's, or an approval
    interrupt's (``needs_human/approval`` with its ``pause_id``); ``None`` for a result the guard did not end.

    >>> outcome_of({"messages": []}) is None
    True
    """
    entry = _state(result).get(STATE_KEY)
    record = entry.get("outcome") if isinstance(entry, Mapping) else None
    record = pause_record(result) or record
    return RecoveryRecord.from_json(dict(record)).to_outcome() if isinstance(record, Mapping) else None


def _state(result: Any) -> Mapping[str, Any]:
    """The final state of an agent's result (a ``version="v2"`` result's ``value``)."""
    if isinstance(result, Mapping):
        return result
    value = getattr(result, "value", None)
    return value if isinstance(value, Mapping) else {}


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


def _approval_asked(error: BaseException) -> bool:
    """``error`` is LangChain's per-call review interrupting (``HumanInTheLoopMiddleware(interrupt_mode="per_call")``).

    >>> _approval_asked(ValueError("x"))
    False
    """
    if not isinstance(error, GraphInterrupt):
        return False
    interrupts = error.args[0] if error.args else ()
    return any(isinstance(i.value, Mapping) and i.value.get("type") == "tool_approval" for i in interrupts)


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
        self.review: GuardedHumanInTheLoop | None = None
        """The guarded review attached to this guard (:meth:`human_in_the_loop`); LangChain's own beside it is
        refused at its first reviewed call."""

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
        return self._thread() or self.options.task_id or f"langchain-{uuid.uuid4().hex[:16]}"

    @staticmethod
    def _thread() -> str | None:
        found = configurable()
        for key in ("task_id", "thread_id"):
            if isinstance(found.get(key), str) and found[key]:
                return str(found[key])
        return None

    def start(self, task_id: str, options: LangChainOptions | None = None) -> Scope:
        """A new guarded run of ``task_id`` for this invocation (``options``: a claimed pause's, or the thread's
        next run's)."""
        opts = options or self.options
        if opts.guard is None and opts.task_id != task_id:
            opts = LangChainOptions.merge(opts, {"task_id": task_id})
        run = GuardedRun.start(opts, reset_forced_function=opts.reset_forced_function)
        run.failures_given_back = True  # the layers between the guard and a tool's body see its exception
        scope = self._scopes[task_id] = Scope(run, task_id, key=task_id)
        return scope

    def _join(self, parent: Scope) -> Scope:
        """The run of an agent invoked inside a guarded tool body: the parent's run, under a key of its own."""
        key = f"{parent.task_id}~{uuid.uuid4().hex[:12]}"
        scope = self._scopes[key] = Scope(parent.run, parent.task_id, key=key, nested=True)
        return scope

    def _start_thread(self) -> Scope:
        """The run of a new invocation (a new message) on its task: the thread's (or ``task_id=``), reopened when
        its last run ended with an answer (``conversation=``)."""
        task_id = self._task_id(None)
        if self.options.conversation:
            options = LangChainOptions.merge(self.options, {"task_id": task_id})
            who = options.who or "a LangGraph thread's new message"
            continue_conversation(options, who=who, why=f"a new message on thread {task_id}")
        return self.start(task_id)

    def scope(self, state: Mapping[str, Any] | None) -> Scope:
        """The run of the invocation that ``state`` belongs to (started here when this process has none: a resume
        in another process continues the task from the store)."""
        entry = (state or {}).get(STATE_KEY)
        key = entry.get("scope") if isinstance(entry, Mapping) else None
        found = self._scopes.get(key) if isinstance(key, str) else None
        if found is not None:
            return found
        task_id = self._task_id(state)
        found = self._scopes.get(task_id)
        return found if found is not None else self.start(task_id)

    def outcome(self, result: Any) -> Outcome | None:
        """The task's outcome for an agent's result, as this process concluded it (with its ``value``), else the
        one the result carries (:func:`outcome_of`); after an approval interrupt, the ``needs_human/approval``
        outcome with its ``pause_id``."""
        entry = _state(result).get(STATE_KEY)
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
        entry = {"task_id": scope.task_id, "outcome": outcome.record().to_dict() if outcome is not None else None}
        return {**entry, "scope": scope.key} if scope.nested else entry

    # --- the agent's start and end ---------------------------------------------------------------------------

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Start this invocation's run (inside a guarded tool body: join the parent's); a task that holds answers
        why and runs nothing."""
        parent = PARENT.get()
        scope = self._join(parent) if parent is not None else self._start_thread()
        update: dict[str, Any] = {STATE_KEY: self._entry(scope)}
        if scope.nested and (scope.run.verdict is not None or scope.run.guard.outcome is not None):
            update.update(messages=[ended_message(scope)], jump_to="end")
        elif scope.run.guard.outcome is not None:
            scope.outcome = scope.run.guard.outcome
            update.update(messages=[ended_message(scope)], jump_to="end")
            self.release(scope)
        return update

    def after_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Conclude the run: the task's one outcome, stored and carried in the state (a nested agent's run leaves
        its parent's task going)."""
        scope = self.scope(state)
        if scope.outcome is None and not scope.nested:
            scope.outcome = drive(conclude(scope.run, self._ending(scope, state)), perform_check)
        return self._ended(scope, state)

    async def aafter_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        scope = self.scope(state)
        if scope.outcome is None and not scope.nested:
            scope.outcome = await adrive(conclude(scope.run, self._ending(scope, state)), perform_check_async)
        return self._ended(scope, state)

    def release(self, scope: Scope) -> None:
        """Forget an invocation's run (its outcome stays readable): the next hook of its task starts from the
        store, as a resume in another process would."""
        if self._scopes.get(scope.key) is scope:
            del self._scopes[scope.key]
        if scope.nested:
            return
        if scope.outcome is not None:
            if len(self._outcomes) > 1024:
                self._outcomes.clear()
            self._outcomes[scope.task_id] = scope.outcome

    def _ended(self, scope: Scope, state: Mapping[str, Any]) -> dict[str, Any]:
        self.release(scope)
        return {STATE_KEY: self._entry(scope)}

    def _ending(self, scope: Scope, state: Mapping[str, Any]) -> Ending:
        return Ending(output=final_output(state), error=scope.error, stopped_by=scope.stopped_by, result=dict(state))

    # --- model requests --------------------------------------------------------------------------------------

    def _facts(
        self, scope: Scope, request: ModelRequest[Any], model: BaseChatModel
    ) -> tuple[str | None, int | None, RetryPolicy]:
        facts = scope.models.get(id(model))
        if facts is None or facts[0] is not model or request.model_settings:
            name, bound = model_name(model), output_bound(model, request.model_settings)
            scope.run.check_enforceable(name, bound, where="the agent's chat model")
            retry = self.options.model_retry or RetryPolicy(max_retries=client_retries(model))
            facts = scope.models[id(model)] = (model, name, bound, retry)
        return facts[1], facts[2], facts[3]

    def _guarded_request(self, scope: Scope, request: ModelRequest[Any]) -> tuple[ModelBody, ModelRequest[Any]]:
        """The request handed down: its chat model guarded at the body, its ``tool_choice`` the guard's."""
        for offered in request.tools:
            if isinstance(offered, Mapping):  # a provider's built-in tool: it runs at the provider, no body here
                hosted = str(offered.get("name") or offered.get("type") or "?")
                scope.run.admit(hosted, "a provider's built-in tool (it runs at the model provider)", _HOSTED_FIX)
        inside = chat_model_in(request.model)
        if inside is None:
            raise ValueError(
                f"LoopGuardMiddleware guards a chat model's requests at its client, and finds no chat model in "
                f"{type(request.model).__name__}: pass the chat model itself to create_agent (for retries, its "
                "max_retries= or the guard's model_retry=; one model per agent)"
            )
        model, rebuild = inside
        name, bound, retry = self._facts(scope, request, model)
        requested = request.tool_choice if request.tool_choice is not None else self.options.tool_choice
        choice = scope.run.tool_choice(requested, ahead=1) if request.tools else requested

        def prompt() -> dict[str, Any]:  # what the request is made of, for the input estimate
            offered = [getattr(t, "name", t) for t in request.tools]
            messages = [m.content for m in request.messages]
            system = request.system_message.content if request.system_message is not None else None
            return {"instructions": system, "input": messages, "tools": offered}

        def steps() -> Any:
            return model_request(
                scope.run,
                choice,
                offers_tools=False,  # decided above, before the request is bound
                model=name,
                request=prompt,
                max_output_tokens=bound,
                retry=retry,
                usage=usage_of,
            )

        body = ModelBody(scope, model, steps)
        return body, request.override(model=rebuild(guarded_model(model, body)), tool_choice=choice)

    def _failed(self, scope: Scope, failed: Failed) -> Any:
        """A model request that gave no response: the answer that ends the agent (the run decides why)."""
        if isinstance(failed.error, ValidationError):  # the chat model could not read the model's answer
            if scope.run.done is None:  # (after validated done it was only the final answer)
                scope.stopped_by, scope.error = "model_behavior", failed.error
        elif failed.verdict is None and failed.error is not None:  # not an API error: stopped/fatal, raised
            conclude_now(scope.run, Ending(error=failed.error))
        elif failed.error is not None:
            scope.error = failed.error
        return ModelResponse(result=[ended_message(scope)])

    def _answered(self, scope: Scope, body: ModelBody, response: Any) -> Any:
        """What the agent reads: the model's response, its calls with arguments that are not JSON refused
        (``invalid_call``) and routed to the tools, where the model reads the refusal; the guard's answer when
        the run was decided, when the model's last call failed, or when no guarded call made the response."""
        if scope.run.verdict is not None or scope.run.guard.outcome is not None:
            return ModelResponse(result=[ended_message(scope)])
        if body.failed is not None:  # a layer answered after the model's request failed
            return self._failed(scope, body.failed)
        if body.runs == 0:
            scope.run.refuse_door(_UNGUARDED_ANSWER)
            return ModelResponse(result=[ended_message(scope)])
        messages = getattr(response, "result", None)
        if not messages or not isinstance(messages[0], AIMessage) or not messages[0].invalid_tool_calls:
            return response
        message = messages[0]
        routed = list(message.tool_calls)
        for bad in message.invalid_tool_calls:
            call_id = bad.get("id") or f"invalid-{len(scope.invalid)}"
            name = bad.get("name") or ""
            parsed = parse_arguments(name, bad.get("args"))  # beyond the bounds: the guard's own reason
            why = parsed if isinstance(parsed, str) else None
            detail = why or f"the arguments for {name!r} are not a JSON object ({bad.get('error') or 'unreadable'})"
            scope.invalid[call_id] = (name, detail)
            routed.append({"name": name, "args": {}, "id": call_id, "type": "tool_call"})
        fixed = message.model_copy(update={"tool_calls": routed, "invalid_tool_calls": []})
        return ModelResponse(result=[fixed, *messages[1:]], structured_response=response.structured_response)

    def _raised(self, scope: Scope, body: ModelBody | None, error: Exception) -> Any:
        """An exception out of the layers below: the model's own failure, or a programming error (the task ends
        ``stopped/fatal`` and it goes on)."""
        if body is not None and body.failed is not None and body.failed.error is error:
            return self._failed(scope, body.failed)
        conclude_now(scope.run, Ending(error=error))
        raise error

    def _decided(self, request: ModelRequest[Any]) -> tuple[Scope, Any]:
        scope = self.scope(request.state)
        if scope.run.verdict is not None or scope.run.guard.outcome is not None:  # decided: the model is not asked
            return scope, ModelResponse(result=[ended_message(scope)])
        return scope, None

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Any:
        """The request handed down with its chat model guarded at the body (every call of it reserved)."""
        scope, decided = self._decided(request)
        if decided is not None:
            return decided
        body: ModelBody | None = None
        try:
            body, guarded = self._guarded_request(scope, request)
            response = handler(guarded)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return self._raised(scope, body, exc)
        except BaseException as exc:
            conclude_now(scope.run, Ending(cancelled=True, detail=f"{type(exc).__name__} during a model request"))
            raise
        return self._answered(scope, body, response)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> Any:
        scope, decided = self._decided(request)
        if decided is not None:
            return decided
        body: ModelBody | None = None
        try:
            body, guarded = self._guarded_request(scope, request)
            response = await handler(guarded)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return self._raised(scope, body, exc)
        except BaseException as exc:
            conclude_now(scope.run, Ending(cancelled=True, detail=f"{type(exc).__name__} during a model request"))
            raise
        return self._answered(scope, body, response)

    # --- tool calls --------------------------------------------------------------------------------------------

    def _body(self, scope: Scope, request: ToolCallRequest) -> ToolBody | ToolMessage:
        """The call's guarded body, or the refusal the model reads at once (arguments that are not JSON or do not
        fit the tool, an unknown tool, a run that ended): nothing below the guard runs for it."""
        call, run = request.tool_call, scope.run
        if self.review is None and isinstance(request.state, Mapping) and _REVIEWED in request.state:
            return refusal(call, refusal_message(run.refuse_door(_PLAIN_REVIEW)))
        name, call_id = call.get("name") or "", call.get("id")
        spec = self.options.tools.get(name) or ToolSpec(declared=False)
        check = _schema_check(request.tool) if request.tool is not None else None
        if call_id in scope.invalid:
            proposed: Any = run.refuse_invalid(name, spec.kind, scope.invalid.pop(call_id)[1])
        elif request.tool is None:
            proposed = run.refuse_invalid(name, spec.kind, f"unknown tool {name!r}")
        else:
            proposed = run.propose(spec, name, call.get("args") or {}, call_id, check=check)
        if isinstance(proposed, Executed):
            return refusal(call, proposed.message or "refused")
        return ToolBody(scope, spec, call, check)

    @staticmethod
    def _handed_down(request: ToolCallRequest, body: ToolBody) -> ToolCallRequest:
        assert request.tool is not None
        return request.override(tool=GuardedTool.around(request.tool, body))

    def _tool_raised(self, scope: Scope, body: ToolBody, error: BaseException) -> ToolMessage:
        if self.review is None and _approval_asked(error):  # LangChain's own review, per call, below the guard
            return refusal(body.call, refusal_message(scope.run.refuse_door(_PLAIN_REVIEW)))
        if isinstance(error, GraphBubbleUp):
            raise error
        if isinstance(error, Exception) and body.raised(error) and body.last is not None:
            return refusal(body.call, scope.run.failure_stands(body.last))
        if not isinstance(error, Exception):
            conclude_now(scope.run, Ending(cancelled=True, detail=f"{type(error).__name__} during a tool call"))
        raise error

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        """The call handed down with its tool guarded at the body; a refusal is the ``ToolMessage`` the model
        reads. The calls of one response take the run one at a time, in the response's order."""
        scope = self.scope(request.state)
        call_id = str(request.tool_call.get("id"))
        before = _preceding(request.state, call_id)
        with scope.turns:
            scope.turns.wait_for(lambda: all(p in scope.served for p in before), timeout=_TURN_WAIT)
            try:
                body = self._body(scope, request)
                if isinstance(body, ToolMessage):
                    return body
                try:
                    reply = handler(self._handed_down(request, body))
                except BaseException as exc:
                    return self._tool_raised(scope, body, exc)
                answer: ToolMessage | Command[Any] = body.answer(reply)
                return answer
            finally:
                scope.served.add(call_id)
                scope.turns.notify_all()

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        scope = self.scope(request.state)
        body = self._body(scope, request)
        if isinstance(body, ToolMessage):
            return body
        try:
            reply = await handler(self._handed_down(request, body))
        except BaseException as exc:
            return self._tool_raised(scope, body, exc)
        answer: ToolMessage | Command[Any] = body.answer(reply)
        return answer

    # --- approvals -------------------------------------------------------------------------------------------

    def human_in_the_loop(self, interrupt_on: Mapping[str, Any], **options: Any) -> GuardedHumanInTheLoop:
        """LangChain's ``HumanInTheLoopMiddleware`` (same arguments), with its interrupts stored as pauses of this
        guard's task and its ``Command(resume=...)`` continuing the same task once (see :mod:`.approvals`)."""
        return GuardedHumanInTheLoop(self, interrupt_on=dict(interrupt_on), **options)
