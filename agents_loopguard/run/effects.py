"""The effects of a guarded run, and the two drivers that perform them: the rules are written once, as generators
that *yield* what must happen (run a tool body, ask the application's verify, wait), and an adapter performs each
effect synchronously (:func:`drive`) or on an event loop (:func:`adrive`).

>>> def steps():
...     answer = yield Check(lambda a, b: a + b, (2, 3))
...     return answer.value * 10
>>> drive(steps(), perform_check)
50
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..values.calls import Call

__all__ = [
    "Answer",
    "Check",
    "DeadlineExceeded",
    "Execute",
    "Sleep",
    "adrive",
    "drive",
    "perform_check",
    "perform_check_async",
    "within_deadline",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Execute:
    """Run the tool body of ``call`` once (the adapter knows how). With a ``timeout`` (the seconds left before the
    task's deadline), an adapter that can interrupt the body raises :class:`DeadlineExceeded` when it runs out."""

    call: Call
    attempt: int = 1
    timeout: float | None = None


class DeadlineExceeded(Exception):
    """A tool body or a model request still running at the task's deadline was abandoned. For a write this proves
    nothing about its effect: it stays unknown."""


@dataclass(frozen=True)
class Check:
    """Run the application's ``verify(args, output)`` (it may be async)."""

    verify: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Sleep:
    """Wait before a retry."""

    seconds: float


@dataclass(frozen=True)
class Answer:
    """What performing an effect gave: a value, or the exception it raised."""

    value: Any = None
    error: Exception | None = None
    retryable: bool = True
    """False when the effect failed after it began to deliver (a streamed response that already yielded events):
    what was delivered cannot be taken back, so the effect is not tried again."""


def perform_check(effect: Check | Sleep) -> Any:
    """Perform the effects every synchronous driver shares: a verify call, a sleep."""
    if isinstance(effect, Sleep):
        time.sleep(effect.seconds)
        return None
    value = effect.verify(*effect.args)
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if close is not None:
            close()
        raise TypeError("an async verify cannot run in a synchronous run: use the async entry point")
    return value


async def perform_check_async(effect: Check | Sleep) -> Any:
    """:func:`perform_check` on an event loop (an async verify is awaited)."""
    if isinstance(effect, Sleep):
        await asyncio.sleep(effect.seconds)
        return None
    value = effect.verify(*effect.args)
    return await value if inspect.isawaitable(value) else value


async def within_deadline(work: Awaitable[T], timeout: float | None) -> T:
    """Await ``work``, abandoning it (cancelled) when ``timeout`` seconds pass: :class:`DeadlineExceeded`. The
    work's own exceptions, a ``TimeoutError`` included, pass through unchanged."""
    if timeout is None:
        return await work
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    finally:
        if not task.done():
            task.cancel()
    if not done:
        raise DeadlineExceeded(f"still running at the task's deadline ({timeout:.3g}s were left)")
    return task.result()


def drive(steps: Generator[Any, Answer, T], perform: Callable[[Any], Any]) -> T:
    """Run a generator of effects synchronously: ``perform(effect)`` for each; an ``Exception`` goes back into the
    steps as an :class:`Answer`; anything else (an interrupt) is thrown in, so the run records it, then re-raised."""
    try:
        effect = next(steps)
        while True:
            try:
                answer = Answer(perform(effect))
            except Exception as exc:
                answer = Answer(error=exc)
            except BaseException as exc:
                _throw(steps, exc)
                raise
            effect = steps.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def adrive(steps: Generator[Any, Answer, T], perform: Callable[[Any], Awaitable[Any]]) -> T:
    """:func:`drive` on an event loop: ``await perform(effect)``; a cancellation is thrown into the steps."""
    try:
        effect = next(steps)
        while True:
            try:
                answer = Answer(await perform(effect))
            except Exception as exc:
                answer = Answer(error=exc)
            except BaseException as exc:
                _throw(steps, exc)
                raise
            effect = steps.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


def _throw(steps: Generator[Any, Answer, Any], error: BaseException) -> None:
    try:
        steps.throw(error)
    except BaseException:  # the steps re-raise what was thrown in, after recording it
        return
