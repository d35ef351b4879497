"""OpenTelemetry for every adapter: spans and metrics of each guarded run through ``opentelemetry-api`` (the ``otel``
extra: ``pip install 'agents-loopguard[otel]'``; your application installs the SDK and its exporters).

:func:`instrument` registers, at the guarded run (the one door of every adapter: the Agents SDK, raw function
calling, LangChain, Google ADK, the durable engines), a telemetry that emits:

- a span per run (``invoke_agent``) with the task's outcome (``loopguard.status``, ``loopguard.reason``, the counters
  used) and, when it paused for an approval, ``loopguard.pause_id`` and a ``loopguard.pause`` event;
- a span per model attempt (``chat {model}``, GenAI semantic conventions: ``gen_ai.operation.name``,
  ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``/``output_tokens``, ``error.type``);
- a span per tool call (``execute_tool {tool}``: ``gen_ai.tool.name``, ``gen_ai.tool.call.id``) with the guard's
  decision (``loopguard.decision``: authorized, refused, replayed; ``loopguard.status``, ``loopguard.reason``) and an
  event per decision (retries, settlement);
- metrics: ``loopguard.decisions`` (by event and reason), ``loopguard.runs`` (by status and reason),
  ``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` (GenAI conventions).

Attributes never hold a call's arguments, a tool's result, an operation id or a secret: names, kinds, statuses,
reasons and counters only. Spans are children of the span current when the run started (your request's span).

>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
>>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
>>> from agents_loopguard import Budget, MemoryStore, create_runner
>>> exporter = InMemorySpanExporter()
>>> provider = TracerProvider()
>>> provider.add_span_processor(SimpleSpanProcessor(exporter))
>>> instrumented = instrument(tracer_provider=provider)
>>> from agents_loopguard.run import GuardedRun, RunOptions
>>> run = GuardedRun.start(RunOptions(budget=Budget(2, 2), store=MemoryStore(), task_id="t-otel"))
>>> attempt = run.begin_model_attempt(model="gpt-4.1")
>>> run.end_model_attempt(attempt, usage=(12, 3))
>>> instrumented.uninstrument()
>>> [(s.name, s.attributes["gen_ai.usage.input_tokens"]) for s in exporter.get_finished_spans()]
[('chat gpt-4.1', 12)]
"""

from __future__ import annotations

from typing import Any

from ..run.telemetry import register

__all__ = ["Instrumentation", "instrument"]


class Instrumentation:
    """What :func:`instrument` set up; :meth:`uninstrument` stops it (runs already started keep theirs)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        try:
            from opentelemetry import metrics, trace

            from .spans import OpenTelemetryRun
        except ImportError as exc:
            raise ImportError(
                f"agents_loopguard.otel needs opentelemetry-api: pip install 'agents-loopguard[otel]' ({exc})"
            ) from None
        self.tracer = trace.get_tracer("agents_loopguard", tracer_provider=tracer_provider)
        self.meter = metrics.get_meter("agents_loopguard", meter_provider=meter_provider)
        self.instruments = OpenTelemetryRun.make_instruments(self.meter)
        self._forget = register(lambda: OpenTelemetryRun(self.tracer, self.instruments))

    def uninstrument(self) -> None:
        """Runs started from now on emit nothing."""
        self._forget()


def instrument(*, tracer_provider: Any = None, meter_provider: Any = None) -> Instrumentation:
    """Emit spans and metrics of every guarded run started from now on, through ``tracer_provider`` and
    ``meter_provider`` (None: OpenTelemetry's global providers, as your application configured them)."""
    return Instrumentation(tracer_provider, meter_provider)
