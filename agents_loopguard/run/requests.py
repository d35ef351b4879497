"""One model request, written once for every adapter: a generator of effects (tenacity-style, as the tool
executions of :mod:`.effects`) that reserves each attempt, says what to send and how long it may take, settles
what came back, and decides the retries.

It yields :class:`Send` ("send this request once, with this ``tool_choice``, within this timeout") and
:class:`~agents_loopguard.run.effects.Sleep` (a backoff), and returns the response, or :class:`Failed` (the
request was refused before it left, or failed for good). The adapter only performs the I/O: the raw loop with the
``openai`` client, the Agents SDK adapter with the run's own ``Model``.

>>> from agents_loopguard import Budget, MemoryStore, RunOptions
>>> from agents_loopguard.run import Answer, GuardedRun, RetryPolicy
>>> run = GuardedRun.start(RunOptions(budget=Budget(model_turns=3, tool_executions=1), store=MemoryStore()))
>>> steps = model_request(run, "required", retry=RetryPolicy(max_retries=1))
>>> send = next(steps)
>>> send.tool_choice, send.attempt
('required', 1)
>>> try:
...     steps.send(Answer("the model's answer"))
... except StopIteration as stop:
...     print(stop.value, run.guard.used.models)
the model's answer 1
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from ..values.calls import Verdict
from .effects import Answer, Sleep
from .guarded import GuardedRun
from .retry import NO_RETRY, RetryPolicy

__all__ = ["Failed", "Send", "model_request"]

Usage = Callable[[Any], "tuple[int, int] | None"]


@dataclass(frozen=True)
class Send:
    """Send the model request once (no client retries: the run owns them), with ``tool_choice``, within
    ``timeout`` seconds (the time left before the task's deadline; ``None``: no deadline)."""

    tool_choice: Any
    timeout: float | None
    attempt: int
    """1 for the first attempt of this request."""
    request: Any = None
    """The adapter's own request for this ``tool_choice`` (what ``build`` returned), when it gave one."""


@dataclass(frozen=True)
class Failed:
    """The request did not give a response. ``verdict`` ends the run (a refusal before it left: ``error`` is
    ``None``; an API error after the allowed retries; the deadline). Without a verdict, ``error`` is not an API
    error (a programming error, or the framework's own): re-raise it, and the run's conclusion decides."""

    error: Exception | None
    verdict: Verdict | None


def _no_usage(_response: Any) -> tuple[int, int] | None:
    return None


def model_request(
    run: GuardedRun,
    tool_choice: Any = None,
    *,
    offers_tools: bool = True,
    model: str | None = None,
    request: Callable[[], Mapping[str, Any]] | None = None,
    max_output_tokens: int | None = None,
    retry: RetryPolicy = NO_RETRY,
    usage: Usage = _no_usage,
    build: Callable[[Any], Any] | None = None,
) -> Generator[Send | Sleep, Answer, Any]:
    """The attempts of one model request, each reserved before it is sent (R1, R2): its worst-case cost and tokens,
    then the turn. ``tool_choice`` is the one asked for (the guard's replaces it, R12); ``model``,
    ``request`` and ``max_output_tokens`` price and bound the attempt (see
    :meth:`~agents_loopguard.run.GuardedRun.begin_model_attempt`); ``retry`` bounds the retries of transient API
    errors; ``usage(response)`` reads the tokens a response reports; ``build(tool_choice)`` makes the adapter's
    request, carried by :class:`Send`. An answer with ``retryable=False`` (a stream that already delivered
    events) is never retried.

    Returns the response, or :class:`Failed`.
    """
    number = 0
    run.begin_model_step()
    while True:
        attempt = run.begin_model_attempt(
            tool_choice,
            offers_tools=offers_tools,
            model=model,
            request=request,
            max_output_tokens=max_output_tokens,
        )
        if isinstance(attempt, Verdict):
            return Failed(None, attempt)
        number += 1
        built = build(attempt.tool_choice) if build is not None else None
        answer = yield Send(attempt.tool_choice, attempt.timeout, number, built)
        if answer.error is None:
            run.end_model_attempt(attempt, usage=usage(answer.value))
            return answer.value
        wait = run.failed_attempt(attempt, answer.error, retry=number - 1, policy=retry if answer.retryable else None)
        if isinstance(wait, Verdict) or wait is None:
            return Failed(answer.error, wait)
        if wait > 0:
            yield Sleep(wait)
