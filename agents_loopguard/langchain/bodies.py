"""The guard at the body: the last points before a tool body runs and before the chat model's client sends.

LangChain's middleware stack runs a ``wrap_tool_call`` or ``wrap_model_call`` listed after the guard *inside* it:
a retry layer there calls the body again, a layer that edits a call changes what runs. So the middleware does not
run the body itself; it hands the request down with the body replaced by a guarded one, and every run of that body
goes through the guarded run first, whoever calls it:

* :class:`GuardedTool` stands for the request's tool (``request.override(tool=...)``): each run of the tool is a
  proposal of the arguments it actually receives (after any edit), reserved, executed once, verified and settled
  (:class:`ToolBody`); a run again under the same call is a new proposal (a read reserved again, a write whose
  answer was lost refused ``unknown_commit``). The body's own exception goes back up, so a retry layer sees it;
  the middleware reports it when it stands.
* :func:`guarded_model` is the request's chat model with its ``_generate_with_cache`` taken over (the point every
  ``invoke`` of a chat model goes through, streamed or not): each call is one model request of the guarded run
  (:class:`ModelBody`), each attempt reserved before it leaves, the client's own retries taken over
  (:mod:`.models`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from pydantic import ConfigDict, PrivateAttr

from ..run import (
    Ending,
    Execute,
    Executed,
    Sleep,
    ToolSpec,
    adrive,
    conclude_now,
    drive,
    perform_check,
    perform_check_async,
    within_deadline,
)
from ..run.requests import Failed, Send
from ..values.calls import Call
from .models import single_attempt
from .scope import ENDED, PARENT, Scope, refusal

__all__ = ["GuardedTool", "ModelBody", "ToolBody", "chat_model_in", "guarded_model", "model_args"]


def model_args(tool: BaseTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments the model gave, without those LangGraph injects (the state, the store, a ``ToolRuntime``).

    >>> from langchain_core.tools import tool
    >>> @tool
    ... def lookup(order: int) -> str:
    ...     '''Look an order up.'''
    ...     return "found"
    >>> model_args(lookup, {"order": 42})
    {'order': 42}
    """
    strip = getattr(tool, "_filter_injected_args", None)
    return dict(strip(dict(args))) if callable(strip) else dict(args)


def _output(reply: Any) -> Any:
    """What ``verify(args, output)`` receives: the text the model reads (a ``Command``'s own object)."""
    return reply.content if isinstance(reply, ToolMessage) else reply


class ToolBody:
    """The runs of one tool call's body (see the module): ``runs`` counts them, ``last`` is what the last one came
    to (``None``: the body never ran, a layer answered without it)."""

    def __init__(self, scope: Scope, spec: ToolSpec, call: Mapping[str, Any], check: Any) -> None:
        self.scope, self.spec, self.call, self.check = scope, spec, dict(call), check
        self.runs = 0
        self.last: Executed | None = None

    def _proposal(self, tool: BaseTool, input: Any) -> Call | Executed:
        args = input.get("args") if isinstance(input, Mapping) else None
        given = model_args(tool, args) if isinstance(args, Mapping) else self.call.get("args") or {}
        name = str(self.call.get("name") or tool.name)
        return self.scope.run.propose(self.spec, name, given, self.call.get("id"), check=self.check)

    def _reply(self, executed: Executed, sent: list[Any]) -> Any:
        self.last = executed
        if executed.error is not None:  # the body's own exception: the layers above decide, then the middleware
            raise executed.error
        if executed.message is not None:
            return refusal(self.call, executed.message)
        if sent:
            return sent[-1]
        output = executed.output  # a committed write's stored output: never executed again
        text = output if isinstance(output, str) else str(output)
        return ToolMessage(content=text, name=self.call.get("name"), tool_call_id=str(self.call.get("id")))

    def run(self, tool: BaseTool, input: Any, config: Any, kwargs: Mapping[str, Any]) -> Any:
        """One run of the body, reserved first (sync)."""
        self.runs += 1
        call = self._proposal(tool, input)
        if isinstance(call, Executed):
            return self._reply(call, [])
        sent: list[Any] = []

        def perform(effect: Any) -> Any:
            if isinstance(effect, Execute):
                entered = PARENT.set(self.scope)  # an agent invoked by the body joins this run
                try:
                    sent.append(tool.invoke(input, config, **kwargs))
                finally:
                    PARENT.reset(entered)
                return _output(sent[-1])
            if isinstance(effect, Sleep):
                time.sleep(effect.seconds)
                return None
            return perform_check(effect)

        try:
            executed = drive(self.scope.run.execute(self.spec, call), perform)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                detail = f"{type(exc).__name__} during a tool call"
                conclude_now(self.scope.run, Ending(cancelled=True, detail=detail))
            raise
        return self._reply(executed, sent)

    async def arun(self, tool: BaseTool, input: Any, config: Any, kwargs: Mapping[str, Any]) -> Any:
        """One run of the body, reserved first (on the event loop)."""
        self.runs += 1
        call = self._proposal(tool, input)
        if isinstance(call, Executed):
            return self._reply(call, [])
        sent: list[Any] = []

        async def perform(effect: Any) -> Any:
            if isinstance(effect, Execute):
                entered = PARENT.set(self.scope)  # an agent invoked by the body joins this run
                try:
                    sent.append(await within_deadline(tool.ainvoke(input, config, **kwargs), effect.timeout))
                finally:
                    PARENT.reset(entered)
                return _output(sent[-1])
            return await perform_check_async(effect)

        try:
            executed = await adrive(self.scope.run.execute(self.spec, call), perform)
        except asyncio.CancelledError:
            conclude_now(self.scope.run, Ending(cancelled=True, detail="the run was cancelled during a tool call"))
            raise
        except BaseException as exc:
            if not isinstance(exc, Exception):
                detail = f"{type(exc).__name__} during a tool call"
                conclude_now(self.scope.run, Ending(cancelled=True, detail=detail))
            raise
        return self._reply(executed, sent)

    def raised(self, error: BaseException) -> bool:
        """``error`` is the last run's own exception (not a layer's, not an interrupt)."""
        if isinstance(error, GraphBubbleUp) or self.last is None or self.last.error is None:
            return False
        return self.scope.run.recorded_failure(error) is not None

    def answer(self, reply: Any) -> Any:
        """What the model reads for this call, from what came back through the layers: the body's reply, the
        refusal, or the failure of its last run (reported now: it stands)."""
        last = self.last
        if last is None:  # no run of the body: a layer answered (a human's rejection, a cached answer)
            return reply
        if last.error is not None:  # a layer turned the body's exception into a message
            return refusal(self.call, self.scope.run.failure_stands(last))
        if last.message is not None:
            return refusal(self.call, last.message)
        return reply


class GuardedTool(BaseTool):
    """A tool whose every run goes through the guard first: the request's tool, handed down the middleware stack
    (``request.override(tool=...)``). Its name, description and schema are the tool's own."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    inner: BaseTool
    body: Any

    @classmethod
    def around(cls, tool: BaseTool, body: ToolBody) -> GuardedTool:
        """``tool`` guarded by ``body`` (built without validation: every field is the tool's)."""
        return cls.model_construct(
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            return_direct=tool.return_direct,
            response_format=tool.response_format,
            inner=tool,
            body=body,
        )

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return self.body.run(self.inner, input, config, kwargs)

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return await self.body.arun(self.inner, input, config, kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - invoke() never reaches it
        raise NotImplementedError("a guarded tool runs through invoke()")


# --- the chat model -------------------------------------------------------------------------------------------


class ModelBody:
    """The calls of the chat model for one model request of the agent: each call one request of the guarded run,
    each of its attempts reserved before it leaves. ``runs`` counts the calls; ``failed`` is what the last one
    came to when it gave no response."""

    def __init__(self, scope: Scope, model: BaseChatModel, steps: Callable[[], Any]) -> None:
        self.scope, self.model, self.steps = scope, model, steps
        self.runs = 0
        self.failed: Failed | None = None

    def _result(self, result: Any) -> Any:
        if isinstance(result, Failed):
            self.failed = result
            if result.error is not None:  # an API error after the allowed retries: the layers above see it
                raise result.error
            ended = AIMessage(content="", name="loopguard", response_metadata={ENDED: "refused"})
            return ChatResult(generations=[ChatGeneration(message=ended)])  # refused before it left: no request
        self.failed = None
        return result

    def generate(self, messages: Any, stop: Any, run_manager: Any, kwargs: Mapping[str, Any]) -> Any:
        self.runs += 1

        def perform(effect: Any) -> Any:
            if isinstance(effect, Send):
                quiet = single_attempt(self.model, effect.timeout)
                return quiet._generate_with_cache(messages, stop=stop, run_manager=run_manager, **kwargs)
            return perform_check(effect)

        try:
            result = drive(self.steps(), perform)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                detail = f"{type(exc).__name__} during a model request"
                conclude_now(self.scope.run, Ending(cancelled=True, detail=detail))
            raise
        return self._result(result)

    async def agenerate(self, messages: Any, stop: Any, run_manager: Any, kwargs: Mapping[str, Any]) -> Any:
        self.runs += 1

        async def perform(effect: Any) -> Any:
            if isinstance(effect, Send):
                quiet = single_attempt(self.model, effect.timeout)
                work = quiet._agenerate_with_cache(messages, stop=stop, run_manager=run_manager, **kwargs)
                return await within_deadline(work, effect.timeout)
            return await perform_check_async(effect)

        try:
            result = await adrive(self.steps(), perform)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                detail = f"{type(exc).__name__} during a model request"
                conclude_now(self.scope.run, Ending(cancelled=True, detail=detail))
            raise
        return self._result(result)


class _Guarded:
    """The chat model's class with its last point before the client taken over (see :func:`guarded_model`)."""

    _loopguard_body: Any

    def _generate_with_cache(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        return self._loopguard_body.generate(messages, stop, run_manager, kwargs)

    async def _agenerate_with_cache(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        return await self._loopguard_body.agenerate(messages, stop, run_manager, kwargs)


_CLASSES: dict[type, type] = {}


def _guarded_class(cls: type) -> type:
    found = _CLASSES.get(cls)
    if found is None:
        namespace: dict[str, Any] = {"__module__": __name__, "__annotations__": {"_loopguard_body": Any}}
        namespace["_loopguard_body"] = PrivateAttr()
        found = _CLASSES[cls] = type(f"Guarded{cls.__name__}", (_Guarded, cls), namespace)
    return found


def chat_model_in(model: Any) -> tuple[BaseChatModel, Callable[[BaseChatModel], Any]] | None:
    """The chat model ``model`` is, or binds (``llm.bind_tools(...)``, ``llm.with_retry()``...: LangChain's
    ``RunnableBinding`` family), and how to put a copy of it back in its place; ``None``: no chat model inside
    (``with_fallbacks``, a configurable model).

    >>> from agents_loopguard.langchain.testing import ScriptedChatModel
    >>> model = ScriptedChatModel(["hi"])
    >>> chat_model_in(model.with_retry())[0] is model, chat_model_in(model.with_fallbacks([model]))
    (True, None)
    """
    if isinstance(model, BaseChatModel):
        return model, lambda guarded: guarded
    bound = getattr(model, "bound", None)
    if isinstance(model, RunnableBindingBase) and bound is not None:
        inner = chat_model_in(bound)
        if inner is not None:
            found, rebuild = inner
            return found, lambda guarded: model.model_copy(update={"bound": rebuild(guarded)})
    return None


def guarded_model(model: BaseChatModel, body: ModelBody) -> BaseChatModel:
    """A copy of ``model`` whose every call is a guarded model request (``body``): the same class to LangChain
    (its tools bound, its structured output and profile read as the model's own), only the last point before its
    client replaced."""
    getattr(model, "_serialized", None)  # LangChain's cached description of the model, made once and copied along
    copy = model.model_copy()
    copy.__class__ = _guarded_class(type(model))
    private = {**(copy.__pydantic_private__ or {}), "_loopguard_body": body}
    object.__setattr__(copy, "__pydantic_private__", private)
    return copy
