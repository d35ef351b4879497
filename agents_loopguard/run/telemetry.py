"""What a guarded run tells an observability backend, for every adapter at once (the run is every adapter's door).

A :class:`Telemetry` hears a run start, each model attempt begin and end, each tool call begin and end, every
decision of the guard (the engine's observer events: authorized, refused, replayed, settled, failed, outcome) and
the run's end with its outcome (and pause). The base class does nothing; :mod:`agents_loopguard.otel` registers one
that emits OpenTelemetry spans and metrics. Registered factories apply to every run started after, whatever its
adapter; a telemetry's failure is logged and never changes a decision.

>>> heard = []
>>> class Names(Telemetry):
...     def decision(self, event, data): heard.append(event)
>>> forget = register(Names)
>>> from agents_loopguard import Budget, MemoryStore, RunOptions
>>> from agents_loopguard.run.guarded import GuardedRun
>>> run = GuardedRun.start(RunOptions(budget=Budget(2, 2), store=MemoryStore()))
>>> _ = run.begin_model_attempt()
>>> forget(); heard
['turn.reserved']
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Telemetry", "register", "telemetry_for_run"]

_log = logging.getLogger("agents_loopguard.run.telemetry")
_FACTORIES: list[Callable[[], Telemetry]] = []
_LOCK = threading.Lock()


class Telemetry:
    """A backend's view of one run (every method does nothing here; a subclass overrides what it needs).

    Tokens: :meth:`model_began` and :meth:`tool_began` answer what :meth:`model_ended` and :meth:`tool_ended` get
    back (a span, say). Data never carries arguments or results: tool names, kinds, statuses, reasons, counters."""

    def run_started(self, run: Any) -> None:
        """A run started (its guard and task are ``run.guard``)."""

    def decision(self, event: str, data: Mapping[str, Any]) -> None:
        """The guard decided (the engine's observer event and its data)."""

    def model_began(self, run: Any, model: str | None) -> Any:
        """A model attempt was reserved and is about to be sent."""
        return None

    def model_ended(self, token: Any, *, usage: tuple[int, int] | None, failure: str | None) -> None:
        """The attempt answered (``usage``: input and output tokens, when reported) or failed (``failure``)."""

    def tool_began(self, run: Any, tool: str, call_id: str | None, kind: str) -> Any:
        """A tool call is about to be authorized (and, if granted, executed)."""
        return None

    def tool_ended(self, token: Any, *, status: str | None, reason: str | None, error: str | None) -> None:
        """The tool call settled: the verdict that ended it, if any, and the error type, if it raised."""

    def run_ended(self, run: Any, outcome: Any, pause_id: str | None) -> None:
        """The run's task ended with ``outcome`` (``pause_id``: it paused for an approval)."""


class _Many(Telemetry):
    """Several telemetries as one; each failure is logged and skipped."""

    def __init__(self, members: list[Telemetry]) -> None:
        self.members = members

    def _each(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        answers = []
        for member in self.members:
            try:
                answers.append(getattr(member, name)(*args, **kwargs))
            except Exception:
                _log.exception("telemetry %s failed on %s", type(member).__name__, name)
                answers.append(None)
        return answers

    def run_started(self, run: Any) -> None:
        self._each("run_started", run)

    def decision(self, event: str, data: Mapping[str, Any]) -> None:
        self._each("decision", event, data)

    def model_began(self, run: Any, model: str | None) -> Any:
        return self._each("model_began", run, model)

    def model_ended(self, token: Any, *, usage: tuple[int, int] | None, failure: str | None) -> None:
        for member, own in zip(self.members, token, strict=True):
            _Many([member])._each("model_ended", own, usage=usage, failure=failure)

    def tool_began(self, run: Any, tool: str, call_id: str | None, kind: str) -> Any:
        return self._each("tool_began", run, tool, call_id, kind)

    def tool_ended(self, token: Any, *, status: str | None, reason: str | None, error: str | None) -> None:
        for member, own in zip(self.members, token, strict=True):
            _Many([member])._each("tool_ended", own, status=status, reason=reason, error=error)

    def run_ended(self, run: Any, outcome: Any, pause_id: str | None) -> None:
        self._each("run_ended", run, outcome, pause_id)


def register(factory: Callable[[], Telemetry]) -> Callable[[], None]:
    """Give every run started from now on a telemetry made by ``factory``; returns the function that stops it."""
    with _LOCK:
        _FACTORIES.append(factory)

    def forget() -> None:
        with _LOCK:
            if factory in _FACTORIES:
                _FACTORIES.remove(factory)

    return forget


def telemetry_for_run() -> Telemetry | None:
    """The telemetry of a run that starts now (None when nothing is registered: a run pays nothing for it)."""
    with _LOCK:
        factories = list(_FACTORIES)
    if not factories:
        return None
    made = []
    for factory in factories:
        try:
            made.append(factory())
        except Exception:
            _log.exception("telemetry factory %r failed", factory)
    return _Many(made) if made else None
