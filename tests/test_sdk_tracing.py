"""Observability: guard decisions as spans in the Agents SDK trace and as logging records, without secrets."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, set_trace_processors, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tracing import TracingProcessor

from agents_loopguard import Budget, MemoryStore
from agents_loopguard.sdk import guarded_tool, run_guarded_sync

SECRET = "sk-live-0123456789abcdefghij"


class Capture(TracingProcessor):
    def __init__(self) -> None:
        self.spans: list[tuple[str, Any, dict[str, Any]]] = []

    def on_trace_start(self, trace: Any) -> None: ...
    def on_trace_end(self, trace: Any) -> None: ...
    def on_span_start(self, span: Any) -> None: ...

    def on_span_end(self, span: Any) -> None:
        data = span.span_data
        self.spans.append((data.type, getattr(data, "name", None), getattr(data, "data", None) or {}))

    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...


@pytest.fixture
def capture() -> Iterator[Capture]:
    cap = Capture()
    set_trace_processors([cap])  # replaces the exporter: nothing leaves the process
    set_tracing_disabled(False)
    try:
        yield cap
    finally:
        set_tracing_disabled(True)
        set_trace_processors([])


@guarded_tool(verify=lambda args, out: {"revision": 0, "done": False, "effect": "none"})
def lookup(customer: str, api_key: str) -> str:
    """Look a customer up."""
    return f"customer {customer}: no orders"


def looping_agent() -> Agent[Any]:
    turns = [[function_call("lookup", {"customer": "c-1", "api_key": SECRET}, call_id=f"c{i}")] for i in range(5)]
    return Agent(name="crm", model=ScriptedModel([*turns, [assistant_message("done")]]), tools=[lookup])


def test_guard_decisions_are_spans_of_the_sdk_trace(capture: Capture) -> None:
    outcome = run_guarded_sync(
        looping_agent(),
        "find c-1",
        budget=Budget(model_turns=9, tool_executions=9),
        store=MemoryStore(),
        task_id="t-trace",
    )
    assert str(outcome.reason) == "same_call"
    ours = [
        (name, data) for kind, name, data in capture.spans if kind == "custom" and str(name).startswith("loopguard.")
    ]
    names = [name for name, _ in ours]
    assert names.count("loopguard.turn.reserved") == 3
    assert names.count("loopguard.call.authorized") == 2 and names.count("loopguard.call.settled") == 2
    assert "loopguard.call.refused" in names
    refused = next(data for name, data in ours if name == "loopguard.call.refused")
    assert refused["reason"] == "same_call" and refused["tool"] == "lookup" and refused["task_id"] == "t-trace"
    assert all(data["task_id"] == "t-trace" for _, data in ours)
    assert SECRET not in json.dumps([data for _, data in ours], default=str)
    assert any(kind == "function" for kind, _, _ in capture.spans), "the spans sit in the SDK's own trace"


def test_no_spans_when_tracing_is_off() -> None:
    cap = Capture()
    set_trace_processors([cap])
    set_tracing_disabled(True)
    try:
        run_guarded_sync(
            looping_agent(), "find c-1", budget=Budget(model_turns=9, tool_executions=9), store=MemoryStore()
        )
    finally:
        set_trace_processors([])
    assert cap.spans == []


def test_decisions_are_logging_records_with_the_task_id(caplog: pytest.LogCaptureFixture) -> None:
    set_tracing_disabled(True)
    caplog.set_level(logging.INFO, logger="agents_loopguard")
    run_guarded_sync(
        looping_agent(),
        "find c-1",
        budget=Budget(model_turns=9, tool_executions=9),
        store=MemoryStore(),
        task_id="t-log",
    )
    ours = [r for r in caplog.records if r.name.startswith("agents_loopguard")]
    assert any(getattr(r, "reason", None) == "same_call" for r in ours)
    assert all(getattr(r, "task_id", None) == "t-log" for r in ours if hasattr(r, "task_id"))
    assert SECRET not in caplog.text
