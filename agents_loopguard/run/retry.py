"""Bounded retries, framework-free: how many attempts, how long to wait, which tool errors mean "try again".

Every attempt is reserved like any other (``max_retries=2`` is three attempts, three reservations); a retry of a
tool call happens only when the failed attempt is verified to have had no effect (see
:class:`~agents_loopguard.run.GuardedRun`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

__all__ = ["MODEL_RETRY", "NO_RETRY", "RetryPolicy", "ToolFailure", "TransientToolError"]


class TransientToolError(Exception):
    """Raise it from a tool to say "this attempt failed transiently" (retried per the tool's :class:`RetryPolicy`)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of one model request or one tool call. ``max_retries=2`` is three attempts, each reserved.

    Model requests are retried on transient API errors (timeouts, connection errors, 408, 409, 429, 5xx; the
    server's ``x-should-retry`` wins), never on 401/403 (``needs_human/permission``) or another 4xx
    (``stopped/fatal``). Tool calls are retried when the tool raises one of ``transient`` and the attempt had no
    effect (a read, or a write whose ``verify`` says ``not_committed``); one of ``permission`` is never retried.

    >>> RetryPolicy(max_retries=2).attempts
    3
    >>> RetryPolicy(initial_delay=0.5, jitter=0).delay(2), RetryPolicy().delay(0, retry_after=0.25)
    (2.0, 0.25)
    """

    max_retries: int = 0
    """Retries after the first attempt."""
    initial_delay: float = 0.5
    """Backoff before the first retry, doubled for each next one."""
    max_delay: float = 8.0
    """Cap of the computed backoff."""
    max_retry_after: float = 60.0
    """Longest wait a server may ask for (``retry-after``); a longer one ends the request instead of waiting."""
    jitter: float = 0.25
    """Up to this fraction is taken off each computed backoff at random."""
    transient: tuple[type[BaseException], ...] = (TransientToolError, TimeoutError, ConnectionError)
    """Tool exceptions that mean "try again": retried only when the attempt is verified to have had no effect."""
    permission: tuple[type[BaseException], ...] = (PermissionError,)
    """Tool exceptions that mean "not allowed": ``needs_human/permission``, never retried."""

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"RetryPolicy.max_retries must be an int >= 0, got {self.max_retries!r}")
        for name in ("initial_delay", "max_delay", "max_retry_after", "jitter"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"RetryPolicy.{name} must be a non-negative finite number, got {value!r}")

    @property
    def attempts(self) -> int:
        """Attempts in all: ``max_retries + 1``."""
        return self.max_retries + 1

    def delay(self, retry: int, *, retry_after: float | None = None) -> float | None:
        """Seconds to wait before retry number ``retry`` (0 for the first retry).

        A positive ``retry_after`` from the server is honoured as is, up to ``max_retry_after`` (beyond it:
        ``None``, do not retry); otherwise exponential backoff capped at ``max_delay``, minus jitter.
        """
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            return retry_after if retry_after <= self.max_retry_after else None
        backoff = min(self.initial_delay * 2.0 ** min(retry, 64), self.max_delay)
        return backoff * (1.0 - self.jitter * random.random())

    def classify(self, error: BaseException) -> Literal["transient", "permission"] | None:
        """How a tool exception is handled: ``permission``, ``transient``, or ``None`` (an executor failure)."""
        if isinstance(error, self.permission):
            return "permission"
        if isinstance(error, self.transient):
            return "transient"
        return None


MODEL_RETRY = RetryPolicy(max_retries=2)
"""The default for model requests: three attempts, like the openai client's own default."""


@dataclass(frozen=True)
class ToolFailure:
    """What a write's ``verify`` receives instead of an output when the attempt raised a transient or permission
    error. ``verify`` must then ask the receiving system, by the operation id, whether the write happened: say
    ``not_committed`` (it may be retried), ``committed``, or ``unknown`` (it needs reconciliation)."""

    error: BaseException
    kind: Literal["transient", "permission"]
    attempt: int
    """1 for the first attempt."""

    def __str__(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


NO_RETRY = RetryPolicy(transient=(), permission=())
"""No retries and no classification: every exception of the tool is an executor failure (the Agents SDK's tools,
whose failures the SDK's own ``failure_error_function`` reports)."""
