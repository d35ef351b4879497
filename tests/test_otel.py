"""OpenTelemetry for every adapter (issue 30): spans and metrics of a guarded run, read with the SDK's in-memory
exporters, through the Agents SDK adapter, the raw function-calling loop and LangChain's ``create_agent`` (the last
two talking to the scripted OpenAI server over real HTTP). Each tool span is matched with a body that really ran
(or did not); no attribute holds an argument, a result or a secret."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel
from agents.testing import function_call as sdk_call
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents_loopguard import Budget, MemoryStore, Reason, Status
from agents_loopguard.function_calling import GuardedTool, run_chat_completions
from agents_loopguard.langchain import LoopGuardMiddleware
from agents_loopguard.otel import Instrumentation, instrument
from agents_loopguard.run import declare_tool
from agents_loopguard.sdk import guarded_tool, run_guarded
from tests.support.scripted_openai import ScriptedOpenAIServer, Usage, tool_call
from tests.support.shop import MODEL

pytestmark = pytest.mark.timeout(90)
SECRET = "sk-live-4f9a2c7e1b3d5f60a8c9e2d4"
QUERY = {"query": "refund policy", "api_key": SECRET}
ran: list[str] = []


class Otel:
    """The SDK's in-memory span exporter and metric reader behind an :func:`instrument`."""

    def __init__(self) -> None:
        self.spans_out = InMemorySpanExporter()
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(self.spans_out))
        self.reader = InMemoryMetricReader()
        self.instrumentation: Instrumentation = instrument(
            tracer_provider=tracer, meter_provider=MeterProvider(metric_readers=[self.reader])
        )

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.spans_out.get_finished_spans() if s.name.startswith(prefix)]

    def points(self, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
        data = self.reader.get_metrics_data()
        found = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            found[tuple(sorted(point.attributes.items()))] = point
        return found


@pytest.fixture
def otel() -> Iterator[Otel]:
    ran.clear()
    seen = Otel()
    yield seen
    seen.instrumentation.uninstrument()


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as srv:
        yield srv


def no_progress(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": 0, "done": False, "effect": "none"}


def everything_said(spans: list[ReadableSpan]) -> str:
    """Every attribute and event of ``spans``, as text (what an exporter would send)."""
    parts = []
    for span in spans:
        parts += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        for event in span.events:
            parts += [event.name, *(f"{k}={v}" for k, v in (event.attributes or {}).items())]
    return "\n".join(parts)


def check_the_loop(otel: Otel, task_id: str, *, model: str | None) -> None:
    """A same-call loop: two searches ran, the third was refused before it ran, the run ended stopped/same_call."""
    (run,) = otel.spans("invoke_agent")
    assert run.attributes is not None
    assert (run.attributes["loopguard.status"], run.attributes["loopguard.reason"]) == ("stopped", "same_call")
    assert run.attributes["loopguard.task_id"] == task_id and run.attributes["loopguard.tools_used"] == 2
    tools = otel.spans("execute_tool")
    decisions = [s.attributes["loopguard.decision"] for s in tools if s.attributes]
    assert decisions == ["authorized", "authorized", "refused"] and len(ran) == 2, (decisions, ran)
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in tools)
    refused = tools[-1]
    assert refused.attributes is not None and refused.attributes["loopguard.reason"] == "same_call"
    assert [e.name for e in refused.events] == ["loopguard.call.refused"]
    chats = otel.spans("chat")
    assert len(chats) == run.attributes["loopguard.models_used"] >= 3
    assert all(c.attributes and c.attributes["gen_ai.operation.name"] == "chat" for c in chats)
    if model is not None:
        assert all(c.attributes and c.attributes.get("gen_ai.request.model") == model for c in chats)
    said = everything_said(otel.spans())
    assert SECRET not in said and "refund policy" not in said, "no argument is ever an attribute"
    refusals = otel.points("loopguard.decisions")
    assert refusals[(("loopguard.event", "call.refused"), ("loopguard.reason", "same_call"))].value == 1
    runs = otel.points("loopguard.runs")
    assert runs[(("loopguard.reason", "same_call"), ("loopguard.status", "stopped"))].value == 1


def test_the_agents_sdk_adapter_emits_a_run_its_model_attempts_and_its_tool_decisions(otel: Otel) -> None:
    set_tracing_disabled(True)

    @guarded_tool(verify=no_progress)
    def search_docs(query: str, api_key: str) -> str:
        """Search the policy documents."""
        ran.append(query)
        return "doc-14"

    loop = [[sdk_call("search_docs", QUERY, call_id=f"call-{i}")] for i in range(10)]
    agent = Agent(name="support", model=ScriptedModel(loop), tools=[search_docs])
    outcome = asyncio.run(
        run_guarded(agent, "refund?", budget=Budget(10, 8), store=MemoryStore(), task_id="sdk-otel", max_turns=20)
    )
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    check_the_loop(otel, "sdk-otel", model=None)


def test_the_raw_function_calling_loop_emits_the_same_over_http(otel: Otel, server: ScriptedOpenAIServer) -> None:
    def search(query: str, api_key: str) -> str:
        ran.append(query)
        return "doc-14"

    server.add(*[tool_call("search", QUERY, usage=Usage(40, 7)) for _ in range(6)])
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    outcome = run_chat_completions(
        client,
        model=MODEL,
        messages=[{"role": "user", "content": "refund?"}],
        tools=[GuardedTool("search", search, verify=no_progress)],
        budget=Budget(10, 8),
        store=MemoryStore(),
        task_id="raw-otel",
    )
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    check_the_loop(otel, "raw-otel", model=MODEL)
    first = otel.spans("chat")[0]
    assert first.attributes is not None and first.attributes["gen_ai.usage.input_tokens"] == 40
    tokens = otel.points("gen_ai.client.token.usage")
    assert {dict(k)["gen_ai.token.type"] for k in tokens} == {"input", "output"}
    assert otel.points("gen_ai.client.operation.duration"), "each attempt's duration is recorded"


def test_langchain_create_agent_emits_the_same_without_adapter_code(otel: Otel, server: ScriptedOpenAIServer) -> None:
    @tool
    def search(query: str, api_key: str) -> str:
        """Search the documents."""
        ran.append(query)
        return "doc-14"

    server.add(*[tool_call("search", QUERY) for _ in range(6)])
    guard = LoopGuardMiddleware(
        budget=Budget(10, 8), store=MemoryStore(), tools={"search": declare_tool("search", verify=no_progress)}
    )
    model = ChatOpenAI(model=MODEL, base_url=server.base_url, api_key="test")
    agent = create_agent(model, tools=[search], middleware=[guard])
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, {"configurable": {"thread_id": "lc-otel"}})
    outcome = guard.outcome(result)
    assert outcome is not None and outcome.reason is Reason.SAME_CALL
    check_the_loop(otel, "lc-otel", model=None)


def test_a_run_without_instrumentation_emits_nothing_and_a_pause_is_an_event(otel: Otel) -> None:
    from tests.support.server_env import paused_task

    store = MemoryStore()
    pause_id = paused_task(store, "refund-77")
    (run,) = otel.spans("invoke_agent")
    assert run.attributes is not None and run.attributes["loopguard.pause_id"] == pause_id
    assert "loopguard.pause" in [e.name for e in run.events]
    otel.instrumentation.uninstrument()
    paused_task(store, "refund-78")
    assert len(otel.spans("invoke_agent")) == 1, "after uninstrument, a run emits nothing"
