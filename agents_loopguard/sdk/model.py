"""A delegating ``Model`` that reserves every model attempt before it is sent, and releases a forced tool_choice.

The SDK's ``on_llm_start`` hook fires once per turn, before its retry loop; a ``Model`` wrapper sees each attempt,
so this is where the model counter is reserved (R1, R2). It is also the one place that acts on the exact request in
streamed and non-streamed runs alike, which is why ``tool_choice`` is replaced here (R12).

The openai client retries failed requests inside one call (two retries by default), where nobody could count them.
The wrapper takes those retries over: the client is told not to retry (the SDK's own switch for provider-managed
retries), and the wrapper makes the same attempts with the same backoff, each one reserved first; so the server's
request count equals ``used.models`` with a default ``AsyncOpenAI()``. Each request goes out with ``timeout =
min(the client's, the time left before Budget.deadline)``, and a request still running at the deadline is
abandoned: the run ends ``stopped/deadline``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Generator
from typing import TYPE_CHECKING, Any

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelProvider, ModelTracing
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel
from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest, ModelRetryNormalizedError
from agents.tool import Tool

from ..run import Answer, GuardedRun, Sleep, adrive, perform_check_async, within_deadline
from ..run.requests import Failed, Send, model_request
from ..run.retry import RetryPolicy
from ..values.arguments import screened_arguments
from ..values.outcome import Reason
from . import private
from ._internal import ACTIVE_RUN, Halt, outside_a_run
from .kinds import admit_tools

if TYPE_CHECKING:
    from openai.types.responses.response_prompt_param import ResponsePromptParam

__all__ = ["GuardedModel", "GuardedModelProvider", "guard_inside", "register_step_model"]

log = logging.getLogger(__name__)
_NO_CLIENT: Any = object()


def _provider_retries(model: Model) -> int:
    """The retries the model's openai client would make inside one call, which the wrapper makes instead (0 where
    the SDK already turned them off for this attempt, the model has no openai client, or this SDK has no switch to
    turn them off: see :mod:`.private`)."""
    switch = private.RETRY_SWITCH
    if not switch.found or switch.already_off():
        return 0
    return private.client_retries(model)


def _with_timeout(model: Model, settings: ModelSettings, timeout: float | None) -> ModelSettings:
    """An OpenAI model's request goes out with ``timeout = min(its own, the time left before the deadline)``."""
    if timeout is None or not isinstance(model, (OpenAIResponsesModel, OpenAIChatCompletionsModel)):
        return settings
    extra = dict(settings.extra_args or {})
    own = extra.get("timeout", private.client_timeout(model))
    extra["timeout"] = max(0.001, min(own, timeout) if isinstance(own, (int, float)) else timeout)
    return dataclasses.replace(settings, extra_args=extra)


def _usage(response: Any) -> tuple[int, int] | None:
    usage = getattr(response, "usage", None)
    if usage is None or not getattr(usage, "requests", 1):
        return None
    return int(getattr(usage, "input_tokens", 0) or 0), int(getattr(usage, "output_tokens", 0) or 0)


class GuardedModel(Model):
    """Wraps a ``Model`` for one guarded run: each attempt is reserved first (a refusal ends the run with the
    guard's reason and is never retried); a forced ``tool_choice`` becomes ``auto``/``none`` once no work remains.

    The entry points wrap every model the run can reach; build one yourself only to drive ``Runner.run`` by hand.
    """

    def __init__(
        self, inner: Model, run: GuardedRun | None = None, *, refusal: Callable[[Exception], Exception] | None = None
    ) -> None:
        self._inner = inner
        self._bound = run
        self._refusal = refusal

    def refusing(self, refusal: Callable[[Exception], Exception]) -> GuardedModel:
        """The same guarded model, raising ``refusal(halt)`` where it would end the run (a guard refusal, the
        deadline): a durable engine's step records that error as final instead of retrying the step (see
        :func:`register_step_model`).

        >>> from agents.testing import ScriptedModel
        >>> GuardedModel(ScriptedModel([])).refusing(RuntimeError).inner.__class__.__name__
        'ScriptedModel'
        """
        return GuardedModel(self._inner, self._bound, refusal=refusal)

    @property
    def _run(self) -> GuardedRun:
        """The run this attempt belongs to: the bound one, else the active guarded run (the agent copies that carry
        this model are shared by every run of an unchanged agent graph)."""
        run = self._bound or ACTIVE_RUN.get()
        if run is None:
            raise outside_a_run("a guarded model")
        return run

    @property
    def inner(self) -> Model:
        """The wrapped model."""
        return self._inner

    def __getattr__(self, name: str) -> Any:
        # The SDK probes optional private capabilities (e.g. _supports_default_prompt_cache_key) with getattr.
        if name in ("_inner", "_bound", "_refusal"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        steps = self._request(model_settings, tools, handoffs, system_instructions, input, usage=_usage)

        async def perform(effect: Send | Sleep) -> Any:
            if isinstance(effect, Sleep):
                return await perform_check_async(effect)
            with private.RETRY_SWITCH.disabled(True):  # the client's own retries, taken over
                return await within_deadline(
                    self._inner.get_response(
                        system_instructions,
                        input,
                        self._settings(model_settings, effect),
                        tools,
                        output_schema,
                        handoffs,
                        tracing,
                        previous_response_id=previous_response_id,
                        conversation_id=conversation_id,
                        prompt=prompt,
                    ),
                    effect.timeout,
                )

        try:
            response: ModelResponse = _response(await adrive(steps, perform))
        except Halt as halt:
            if self._refusal is None:
                raise
            raise self._refusal(halt) from halt
        output = _screened(response.output)
        return response if output is response.output else dataclasses.replace(response, output=output)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        steps = self._request(model_settings, tools, handoffs, system_instructions, input, usage=lambda usage: usage)
        effect = next(steps)
        while True:  # retried only before the first event (what the client's own retries could do)
            if isinstance(effect, Sleep):
                await perform_check_async(effect)
                answer = Answer()
            else:
                usage: tuple[int, int] | None = None
                started = False
                try:
                    with private.RETRY_SWITCH.disabled(True):
                        events = self._inner.stream_response(
                            system_instructions,
                            input,
                            self._settings(model_settings, effect),
                            tools,
                            output_schema,
                            handoffs,
                            tracing,
                            previous_response_id=previous_response_id,
                            conversation_id=conversation_id,
                            prompt=prompt,
                        )
                        async for event in _until_deadline(events, self._run):
                            started = True
                            usage = _usage(getattr(event, "response", None)) or usage
                            yield _screened_event(event)
                except Exception as exc:
                    answer = Answer(error=exc, retryable=not started)
                else:
                    answer = Answer(usage)
            try:
                effect = steps.send(answer)
            except StopIteration as stop:
                try:
                    _response(stop.value)
                except Halt as halt:
                    if self._refusal is None:
                        raise
                    raise self._refusal(halt) from halt
                return

    def _request(
        self,
        settings: ModelSettings,
        tools: list[Tool],
        handoffs: list[Handoff],
        instructions: str | None,
        input: str | list[TResponseInputItem],
        *,
        usage: Any,
    ) -> Generator[Send | Sleep, Answer, Any]:
        """The guarded run's model request (each attempt reserved: its worst-case cost and tokens, then the turn;
        a refusal ends the run, never retried), with the retries the client would have made."""

        def request() -> dict[str, Any]:  # what the prompt is made of, for the input estimate
            offered = [
                {
                    "name": getattr(t, "name", ""),
                    "description": getattr(t, "description", ""),
                    "parameters": getattr(t, "params_json_schema", None),
                }
                for t in [*tools, *handoffs]
            ]
            return {"instructions": instructions, "input": input, "tools": offered}

        admit_tools(self._run, tools)  # tools that appeared at run time, before the request offers them
        name = getattr(self._inner, "model", None)
        return model_request(
            self._run,
            settings.tool_choice,
            offers_tools=bool(tools or handoffs),
            model=name if isinstance(name, str) else None,
            request=request,
            max_output_tokens=settings.max_tokens,
            retry=RetryPolicy(max_retries=_provider_retries(self._inner)),
            usage=usage,
        )

    def _settings(self, settings: ModelSettings, send: Send) -> ModelSettings:
        """The attempt's settings: the guard's ``tool_choice`` (R12) and the deadline's timeout."""
        if send.tool_choice != settings.tool_choice:
            settings = dataclasses.replace(settings, tool_choice=send.tool_choice)
        return _with_timeout(self._inner, settings, send.timeout)

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        """The inner model's advice, except for a guard refusal: that is an abort, which no retry policy overrides."""
        if isinstance(request.error, Halt):
            return ModelRetryAdvice(
                suggested=False,
                reason=str(request.error),
                normalized=ModelRetryNormalizedError(is_abort=True),
            )
        return self._inner.get_retry_advice(request)

    async def close(self) -> None:
        await self._inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self._inner._cleanup_on_run_end(owner)


def _response(outcome: Any) -> Any:
    """The response of a model request; a refusal or the deadline halts the run, any other failure is re-raised
    for the SDK's own handling (its retry policy, then the run's conclusion)."""
    if not isinstance(outcome, Failed):
        return outcome
    if outcome.error is None or (outcome.verdict is not None and outcome.verdict.reason is Reason.DEADLINE):
        assert outcome.verdict is not None
        raise Halt(outcome.verdict) from outcome.error
    raise outcome.error


def _screened_item(item: Any) -> Any:
    """``item``, or, for a function call whose arguments are beyond the bounds (nested too deep, too long), a copy
    carrying the refusal instead: the SDK parses a call's arguments as the response arrives, before any tool runs
    (see :mod:`agents_loopguard.values.arguments`); the guarded tool then refuses it (``invalid_call``)."""
    arguments = getattr(item, "arguments", None)
    if not isinstance(arguments, str):
        return item
    screened = screened_arguments(arguments)
    return item if screened is arguments else item.model_copy(update={"arguments": screened})


def _screened(output: list[Any]) -> list[Any]:
    """The items of a response, each screened (the same list when nothing changed)."""
    screened = [_screened_item(item) for item in output]
    return output if all(new is old for new, old in zip(screened, output, strict=True)) else screened


def _screened_event(event: Any) -> Any:
    """A streamed event with its function calls screened: an item's, the completed response's, its own."""
    event = _screened_item(event)
    item = getattr(event, "item", None)
    if item is not None and (new := _screened_item(item)) is not item:
        event = event.model_copy(update={"item": new})
    response: Any = getattr(event, "response", None)
    output = getattr(response, "output", None)
    if isinstance(output, list) and (screened := _screened(output)) is not output:
        event = event.model_copy(update={"response": response.model_copy(update={"output": screened})})
    return event


async def _until_deadline(events: AsyncIterator[Any], run: GuardedRun) -> AsyncIterator[Any]:
    """The events of a streamed response, each awaited no longer than the time left before the deadline."""
    iterator = aiter(events)
    while True:
        try:
            event = await within_deadline(anext(iterator), run.remaining())
        except StopAsyncIteration:
            return
        yield event


_STEP_MODELS: dict[type[Model], tuple[str, Callable[[Exception], Exception] | None]] = {}
"""A durable engine's model wrapper type -> the attribute holding the model it runs inside the engine's step, and
the error its step records as final (or ``None``: the guard's own halt)."""
_KNOWN_STEP_MODELS: dict[str, tuple[str, Callable[[Exception], Exception] | None]] = {
    "dbos_openai_agents.runner.DBOSModelWrapper": ("model", None)
}
"""The wrappers known by name, recognised without importing their engine (nor the adapter that registers them)."""


def _step_model(model: Any) -> tuple[str, Callable[[Exception], Exception] | None] | None:
    kind = type(model)
    return _STEP_MODELS.get(kind) or _KNOWN_STEP_MODELS.get(f"{kind.__module__}.{kind.__qualname__}")


def register_step_model(
    wrapper: type[Model], attribute: str, *, refusal: Callable[[Exception], Exception] | None = None
) -> None:
    """Declare a durable engine's model wrapper: a ``wrapper`` runs the model at ``wrapper.<attribute>`` inside the
    engine's step, so the guard wraps that inner model, never the wrapper (R17: a step the engine answers from its
    log then reserves nothing). The durable adapters (:mod:`agents_loopguard.durable`) register theirs.

    ``refusal`` turns the guard's halt (a refusal or the deadline, raised inside the step) into the error the engine
    records as final and never retries (Restate's ``TerminalError``, Temporal's non-retryable ``ApplicationError``);
    without it an engine that retries a failed step would ask the guard again, forever."""
    _STEP_MODELS[wrapper] = (attribute, refusal)


def is_step_model(model: Any) -> bool:
    """True for a durable engine's model wrapper (see :func:`register_step_model`)."""
    return _step_model(model) is not None


def guard_inside(model: Model, guard: Callable[[Model], Model]) -> Model:
    """``guard(model)``, or, for a durable engine's wrapper (see :func:`register_step_model`), the same wrapper with
    ``guard`` applied to the model it runs inside its step (already guarded: as is).

    >>> from agents.testing import ScriptedModel
    >>> type(guard_inside(ScriptedModel([]), GuardedModel)).__name__
    'GuardedModel'
    """
    if isinstance(model, GuardedModel):
        return model
    registered = _step_model(model)
    if registered is None:
        return guard(model)
    attribute, refusal = registered
    inner = getattr(model, attribute)
    if isinstance(inner, Model):
        guarded = guard_inside(inner, guard)
        if refusal is not None and isinstance(guarded, GuardedModel) and guarded._refusal is not refusal:
            guarded = guarded.refusing(refusal)
        setattr(model, attribute, guarded)
    return model


class GuardedModelProvider(ModelProvider):
    """Wraps a ``ModelProvider`` so that every model it resolves (by name, every turn) is a :class:`GuardedModel`."""

    def __init__(self, inner: ModelProvider, run: GuardedRun) -> None:
        self._inner = inner
        self._run = run

    @property
    def run(self) -> GuardedRun:
        """The guarded run this provider's models belong to."""
        return self._run

    @property
    def inner_provider(self) -> ModelProvider:
        """The wrapped provider (a durable engine's, say)."""
        return self._inner

    def get_model(self, model_name: str | None) -> Model:
        return guard_inside(self._inner.get_model(model_name), lambda model: GuardedModel(model, self._run))

    async def aclose(self) -> None:
        await self._inner.aclose()
