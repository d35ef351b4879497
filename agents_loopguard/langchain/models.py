"""What the middleware needs from a chat model: its name, its output bound, the retries its client would make, and
a copy whose client does not retry (so every HTTP request is one reserved attempt), bounded by the deadline.

``ChatOpenAI`` (and its subclasses) keep an ``openai`` client that retries inside one call (``max_retries``,
2 by default): nobody outside could count those requests. The middleware takes them over as the Agents SDK
adapter does: each attempt goes out through a copy of the model whose clients are ``with_options(max_retries=0)``
and the guarded run makes the same retries, each reserved first. A chat model of another provider keeps its own
client; its retries (if it has any) cannot be seen from here: give it ``max_retries=0`` and ``model_retry=``.
"""

from __future__ import annotations

from typing import Any

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage

__all__ = ["client_retries", "model_name", "output_bound", "single_attempt", "usage_of"]

_CLIENTS = ("root_client", "root_async_client")
_quiet: dict[int, tuple[Any, Any]] = {}
"""id(model) -> (the model, kept so its id stays its own; its single-attempt copy, or the model itself when it has
no openai client)."""


def _openai_clients(model: Any) -> bool:
    return any(isinstance(getattr(model, name, None), (openai.OpenAI, openai.AsyncOpenAI)) for name in _CLIENTS)


def model_name(model: BaseChatModel) -> str | None:
    """The model's name, for its price (``ChatOpenAI.model_name``)."""
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return name if isinstance(name, str) else None


def output_bound(model: BaseChatModel, settings: dict[str, Any]) -> int | None:
    """The bound of one answer: the request's ``max_tokens`` setting, else the model's own."""
    for value in (
        settings.get("max_tokens"),
        settings.get("max_completion_tokens"),
        getattr(model, "max_tokens", None),
    ):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def client_retries(model: BaseChatModel) -> int:
    """The retries the model's openai client would make inside one call (0 for a model without one)."""
    if not _openai_clients(model):
        return 0
    retries = getattr(model, "max_retries", None)
    if retries is None:
        return openai.DEFAULT_MAX_RETRIES
    return retries if isinstance(retries, int) and retries > 0 else 0


def _copy(model: Any, **options: Any) -> Any:
    update: dict[str, Any] = {"max_retries": 0}
    root = getattr(model, "root_client", None)
    if isinstance(root, openai.OpenAI):
        quiet = root.with_options(**options)
        update.update(root_client=quiet, client=quiet.chat.completions)
    root_async = getattr(model, "root_async_client", None)
    if isinstance(root_async, openai.AsyncOpenAI):
        quiet_async = root_async.with_options(**options)
        update.update(root_async_client=quiet_async, async_client=quiet_async.chat.completions)
    return model.model_copy(update=update)


def single_attempt(model: BaseChatModel, timeout: float | None) -> BaseChatModel:
    """``model`` sending one HTTP request per call (its client's retries off), within ``timeout`` seconds when
    given (``min`` with its own). The same model comes back for a model without an openai client."""
    if timeout is None:  # every attempt of a run without a deadline: what was found for this model (once)
        cached = _quiet.get(id(model))
        if cached is None or cached[0] is not model:
            if len(_quiet) > 256:
                _quiet.clear()
            quiet = _copy(model, max_retries=0) if _openai_clients(model) else model
            cached = _quiet[id(model)] = (model, quiet)
        return cached[1]  # type: ignore[no-any-return]
    if not _openai_clients(model):
        return model
    own = getattr(model, "request_timeout", None)
    bounded = min(own, timeout) if isinstance(own, (int, float)) else timeout
    return _copy(model, max_retries=0, timeout=max(0.001, bounded))  # type: ignore[no-any-return]


def usage_of(response: Any) -> tuple[int, int] | None:
    """The tokens a model response reports (``AIMessage.usage_metadata``; a ``ChatResult``'s generations)."""
    generations = getattr(response, "generations", None)
    found = [getattr(g, "message", None) for g in generations] if isinstance(generations, list) else None
    for message in found or getattr(response, "result", None) or [response]:
        if isinstance(message, AIMessage) and message.usage_metadata:
            usage = message.usage_metadata
            return int(usage.get("input_tokens", 0) or 0), int(usage.get("output_tokens", 0) or 0)
    return None
