"""The OpenTelemetry telemetry of one guarded run: its spans, events and metrics (see :mod:`agents_loopguard.otel`).

Spans are made with explicit parents (the run's span, itself a child of the span current when the run started), so
tool calls that run in parallel, in other threads or tasks, each get their own span under the run's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ..run.telemetry import Telemetry

__all__ = ["OpenTelemetryRun"]

_FAILED = {"fatal", "executor_exception", "invalid_result", "invalid_evidence"}
"""Outcome reasons that make a run's span an error (a loop the guard cut is the guard working, not an error)."""
_DECIDED = {"call.authorized": "authorized", "call.refused": "refused", "call.replayed": "replayed"}
_CLOSING = {"call.settled", "call.failed"}


@dataclass
class _Tool:
    span: Span
    tool: str
    decided: bool = False


@dataclass
class _Attempt:
    span: Span
    model: str | None
    started: float = field(default_factory=time.perf_counter)


class OpenTelemetryRun(Telemetry):
    """Spans and metrics of one run (made by :func:`agents_loopguard.otel.instrument` for each run)."""

    def __init__(self, tracer: Any, instruments: dict[str, Any]) -> None:
        self.tracer = tracer
        self.instruments = instruments
        self.span: Span | None = None
        self.parent: Any = None
        self.tools: list[_Tool] = []
        self.lock = threading.Lock()

    @staticmethod
    def make_instruments(meter: Any) -> dict[str, Any]:
        """The run's metric instruments on ``meter`` (made once per :func:`instrument`)."""
        return {
            "decisions": meter.create_counter(
                "loopguard.decisions", unit="{decision}", description="Guard decisions, by event and reason"
            ),
            "runs": meter.create_counter(
                "loopguard.runs", unit="{run}", description="Guarded runs ended, by status and reason"
            ),
            "duration": meter.create_histogram(
                "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration"
            ),
            "tokens": meter.create_histogram(
                "gen_ai.client.token.usage", unit="{token}", description="Input and output tokens used"
            ),
        }

    # --- the run --------------------------------------------------------------------------------------------------

    def run_started(self, run: Any) -> None:
        self.span = self.tracer.start_span(
            "invoke_agent",
            kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "invoke_agent", "loopguard.task_id": run.guard.task_id},
        )
        self.parent = trace.set_span_in_context(self.span, otel_context.get_current())

    def run_ended(self, run: Any, outcome: Any, pause_id: str | None) -> None:
        status, reason = str(outcome.status), str(outcome.reason)
        self.instruments["runs"].add(1, {"loopguard.status": status, "loopguard.reason": reason})
        span = self.span
        if span is None or not span.is_recording():
            return
        span.set_attributes(
            {
                "loopguard.status": status,
                "loopguard.reason": reason,
                "loopguard.models_used": outcome.used.models,
                "loopguard.tools_used": outcome.used.tools,
            }
        )
        if pause_id is not None:
            span.set_attribute("loopguard.pause_id", pause_id)
            span.add_event("loopguard.pause", {"loopguard.pause_id": pause_id})
        if reason in _FAILED:
            span.set_status(Status(StatusCode.ERROR, f"{status}/{reason}"))
        span.end()

    # --- model attempts -------------------------------------------------------------------------------------------

    def model_began(self, run: Any, model: str | None) -> Any:
        attributes = {"gen_ai.operation.name": "chat", "loopguard.turn": run.guard.used.models}
        if model:
            attributes["gen_ai.request.model"] = model
        name = f"chat {model}" if model else "chat"
        span = self.tracer.start_span(name, context=self.parent, kind=SpanKind.CLIENT, attributes=attributes)
        return _Attempt(span, model)

    def model_ended(self, token: Any, *, usage: tuple[int, int] | None, failure: str | None) -> None:
        if not isinstance(token, _Attempt):
            return
        labels = {"gen_ai.operation.name": "chat", **({"gen_ai.request.model": token.model} if token.model else {})}
        if usage is not None:
            token.span.set_attributes({"gen_ai.usage.input_tokens": usage[0], "gen_ai.usage.output_tokens": usage[1]})
            for kind, count in (("input", usage[0]), ("output", usage[1])):
                self.instruments["tokens"].record(count, {**labels, "gen_ai.token.type": kind})
        if failure is not None:
            labels["error.type"] = failure
            token.span.set_attribute("error.type", failure)
            token.span.set_status(Status(StatusCode.ERROR, failure))
        self.instruments["duration"].record(time.perf_counter() - token.started, labels)
        token.span.end()

    # --- tool calls -----------------------------------------------------------------------------------------------

    def tool_began(self, run: Any, tool: str, call_id: str | None, kind: str) -> Any:
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function",
            "loopguard.kind": kind,
        }
        if call_id:
            attributes["gen_ai.tool.call.id"] = call_id
        span = self.tracer.start_span(f"execute_tool {tool}", context=self.parent, attributes=attributes)
        entry = _Tool(span, tool)
        with self.lock:
            self.tools.append(entry)
        return entry

    def tool_ended(self, token: Any, *, status: str | None, reason: str | None, error: str | None) -> None:
        if not isinstance(token, _Tool):
            return
        with self.lock:
            if token in self.tools:
                self.tools.remove(token)
        if status is not None:
            token.span.set_attributes({"loopguard.status": status, "loopguard.reason": str(reason)})
        if error is not None:
            token.span.set_attribute("error.type", error)
            token.span.set_status(Status(StatusCode.ERROR, error))
        token.span.end()

    # --- decisions ------------------------------------------------------------------------------------------------

    def decision(self, event: str, data: Mapping[str, Any]) -> None:
        reason = data.get("reason")
        self.instruments["decisions"].add(1, {"loopguard.event": event, "loopguard.reason": str(reason or "")})
        attributes = {
            f"loopguard.{key}": value
            for key, value in data.items()
            if key in ("status", "reason", "kind", "error", "models", "tools", "revision") and value is not None
        }
        tool = data.get("tool")
        target = self._tool_for(event, tool) if isinstance(tool, str) else None
        span = target.span if target is not None else self.span
        if span is None or not span.is_recording():
            return
        span.add_event(f"loopguard.{event}", attributes)
        if target is not None and event in _DECIDED and not target.decided:
            target.decided = True
            span.set_attribute("loopguard.decision", _DECIDED[event])

    def _tool_for(self, event: str, tool: str) -> _Tool | None:
        """The open tool call an event is about: the oldest of that tool not yet decided (a decision), or the oldest
        decided and not yet settled (a settlement)."""
        with self.lock:
            for entry in self.tools:
                if entry.tool != tool:
                    continue
                if event in _CLOSING and entry.decided:
                    return entry
                if event not in _CLOSING and (not entry.decided or event == "call.authorized"):
                    return entry
        return None
