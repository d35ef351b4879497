"""A delegating ``Model`` that reserves every model attempt before it is sent, and releases a forced tool_choice.

The SDK's ``on_llm_start`` hook fires once per turn, before its retry loop; a ``Model`` wrapper sees each attempt,
so this is where the model counter is reserved (R1, R2). It is also the one place that acts on the exact request in
streamed and non-streamed runs alike, which is why ``tool_choice`` is replaced here (R12).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelProvider, ModelTracing
from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest, ModelRetryNormalizedError
from agents.tool import Tool

from ..core import Verdict
from ..model_errors import ModelFailure, classify_model_error
from ..run import GuardedRun, ModelAttempt
from ._internal import Halt

if TYPE_CHECKING:
    from openai.types.responses.response_prompt_param import ResponsePromptParam

__all__ = ["GuardedModel", "GuardedModelProvider"]

log = logging.getLogger(__name__)
_warned: weakref.WeakSet[Any] = weakref.WeakSet()


def _warn_client_retries(model: Model) -> None:
    """The openai client's own retries happen inside one ``get_response``, out of the guard's sight: say so once."""
    client = getattr(model, "_client", None)  # the SDK's OpenAI models keep their client there
    retries = getattr(client, "max_retries", 0)
    try:
        if client is None or not isinstance(retries, int) or retries <= 0 or client in _warned:
            return
        _warned.add(client)
    except TypeError:  # a client that cannot be weakly referenced: no warning
        return
    log.warning(
        "the openai client of %s retries up to %d times inside one model call, where the guard cannot count the "
        "attempts: create it with max_retries=0 and retry with ModelSettings(retry=ModelRetrySettings(...)), "
        "whose every attempt is reserved",
        type(model).__name__,
        retries,
    )


def _failure(error: BaseException) -> ModelFailure:
    """An openai client error as classified for every adapter; anything else traced under its class name."""
    failure = classify_model_error(error)
    if failure is None:
        name = type(error).__name__
        failure = ModelFailure("fatal", False, None, True, name, f"{name}: {error}")
    return failure


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

    def __init__(self, inner: Model, run: GuardedRun) -> None:
        self._inner = inner
        self._run = run
        _warn_client_retries(inner)

    @property
    def inner(self) -> Model:
        """The wrapped model."""
        return self._inner

    def __getattr__(self, name: str) -> Any:
        # The SDK probes optional private capabilities (e.g. _supports_default_prompt_cache_key) with getattr.
        if name in ("_inner", "_run"):
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
        attempt, settings = self._begin(model_settings, offers_tools=bool(tools or handoffs))
        try:
            response = await self._inner.get_response(
                system_instructions,
                input,
                settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
        except Exception as exc:
            self._run.end_model_attempt(attempt, failure=_failure(exc))
            raise
        self._run.end_model_attempt(attempt, usage=_usage(response))
        return response

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
        attempt, settings = self._begin(model_settings, offers_tools=bool(tools or handoffs))
        usage: tuple[int, int] | None = None
        try:
            async for event in self._inner.stream_response(
                system_instructions,
                input,
                settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            ):
                usage = _usage(getattr(event, "response", None)) or usage
                yield event
        except Exception as exc:
            self._run.end_model_attempt(attempt, failure=_failure(exc))
            raise
        self._run.end_model_attempt(attempt, usage=usage)

    def _begin(self, settings: ModelSettings, *, offers_tools: bool) -> tuple[ModelAttempt, ModelSettings]:
        """Reserve the attempt (a refusal ends the run, never retried) and take the guard's ``tool_choice``."""
        attempt = self._run.begin_model_attempt(settings.tool_choice, offers_tools=offers_tools)
        if isinstance(attempt, Verdict):
            raise Halt(attempt)
        if attempt.tool_choice != settings.tool_choice:
            settings = dataclasses.replace(settings, tool_choice=attempt.tool_choice)
        return attempt, settings

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


class GuardedModelProvider(ModelProvider):
    """Wraps a ``ModelProvider`` so that every model it resolves (by name, every turn) is a :class:`GuardedModel`."""

    def __init__(self, inner: ModelProvider, run: GuardedRun) -> None:
        self._inner = inner
        self._run = run

    @property
    def run(self) -> GuardedRun:
        """The guarded run this provider's models belong to."""
        return self._run

    def get_model(self, model_name: str | None) -> Model:
        model = self._inner.get_model(model_name)
        return model if isinstance(model, GuardedModel) else GuardedModel(model, self._run)

    async def aclose(self) -> None:
        await self._inner.aclose()
