"""What an error of the ``openai`` client (or of ``google.genai``'s, under Google ADK) means for a guarded run, for
every adapter.

The raw function-calling loop and the Agents SDK adapter both talk to models through the ``openai`` client; this is
the one place that reads its errors: transient (a timeout, a lost connection, 408/409/429/5xx: the server's
``x-should-retry`` wins), permission (401, 403, an exhausted quota: a human must act, never retried) or fatal (any
other 4xx: the request itself is wrong). The guarded run turns the classification into a verdict.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Literal

__all__ = ["ModelFailure", "classify_model_error"]

FailureKind = Literal["transient", "permission", "fatal"]


@dataclass(frozen=True)
class ModelFailure:
    """A failed model request, classified."""

    kind: FailureKind
    may_retry: bool
    """False when the server said not to (``x-should-retry: false``) or the kind is never retried."""
    retry_after: float | None
    """Seconds the server asked to wait (``retry-after-ms`` / ``retry-after``)."""
    billed: bool
    """False for an error response (it is not billed); True for a timeout or a lost connection, whose request may
    have been served: its worst-case cost stays reserved."""
    label: str
    """The trace's label: the HTTP status, or the exception's class name."""
    detail: str
    """A one-line description (the API's message, not the request)."""


def _retry_after(headers: object) -> float | None:
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = get(name)
        if value is not None:
            with contextlib.suppress(ValueError):
                return float(value) / scale
    return None


def _classify_genai_error(error: BaseException) -> ModelFailure | None:
    """``google.genai``'s ``APIError`` (Google ADK's ``Gemini`` model), read by its shape (this module imports no
    framework but openai): the same classes by HTTP status as the openai client's errors."""
    status = getattr(error, "code", None)
    if not type(error).__module__.startswith("google.genai") or not isinstance(status, int):
        return None
    message = getattr(error, "message", None) or str(error)
    detail = f"{type(error).__name__}: Error code: {status} - {message}"
    response = getattr(error, "response", None)
    retry_after = _retry_after(getattr(response, "headers", None))
    if status in (401, 403):
        return ModelFailure("permission", False, None, False, str(status), detail)
    transient = status in (408, 409, 429) or status >= 500
    return ModelFailure("transient" if transient else "fatal", transient, retry_after, False, str(status), detail)


def classify_model_error(error: BaseException) -> ModelFailure | None:
    """Classify an ``openai`` client error; ``None`` for anything else (a programming error, not an outcome).

    A 401 from the server is ``permission`` (never retried, not billed); a timeout is ``transient`` and keeps its
    worst-case cost (the tests drive both through the real client against a scripted server).

    A ``RecursionError`` raised while decoding JSON is the client failing to read the model's answer (nested
    deeper than its parser goes: hostile input, see :mod:`agents_loopguard.values.arguments`): ``transient`` like a
    server error (another attempt may be readable; each is reserved), billed.

    >>> classify_model_error(ValueError("not an API error")) is None
    True
    >>> classify_model_error(RecursionError("maximum recursion depth exceeded while decoding a JSON array")).label
    'unreadable_answer'
    """
    if isinstance(error, RecursionError) and "JSON" in str(error):
        detail = "the model's answer could not be read: its JSON is nested too deeply for the client's parser"
        return ModelFailure("transient", True, None, True, "unreadable_answer", detail)
    openai = sys.modules.get("openai")  # not imported: the error is none of its (the operator's CLI never loads it)
    if openai is not None and isinstance(error, openai.APIConnectionError):  # timeouts included: maybe served
        return ModelFailure("transient", True, None, True, type(error).__name__, f"{type(error).__name__}: {error}")
    if openai is None or not isinstance(error, openai.APIStatusError):
        return _classify_genai_error(error)
    status = error.status_code
    detail = f"{type(error).__name__}: {error.message}"  # the message starts with "Error code: <status>"
    retry_after = _retry_after(error.response.headers)
    if status in (401, 403) or (status == 429 and error.code == "insufficient_quota"):
        return ModelFailure("permission", False, None, False, str(status), detail)
    transient = status in (408, 409, 429) or status >= 500
    kind: FailureKind = "transient" if transient else "fatal"
    should = error.response.headers.get("x-should-retry")
    may_retry = should == "true" if should in ("true", "false") else transient
    return ModelFailure(kind, may_retry, retry_after, False, str(status), detail)
