"""Drop-in without false stops (issue 11.5), in every adapter, on SQLite and PostgreSQL.

A correct application is not stopped: six different reads then an answer, a 50-page pagination whose pages the
application verifies, 20 polls within the wait policy, a 30-step productive run. A loop still is: an identical call
by its 3rd proposal (R7), varied arguments that nobody verifies by ``Policy.max_unverified`` (R6: progress is what the
application verifies). An unverified final answer stays ``partial/unverified_final`` and is logged at INFO, not as a
warning (R11).

Each scenario is one list of tool calls, run through the Agents SDK adapter (``ScriptedModel``) and through the raw
Chat Completions loop (the real ``openai`` client over HTTP against the scripted server) and through the Google ADK
plugin (ADK's ``Gemini`` over HTTP against the scripted Gemini endpoint), with the same tool bodies.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message
from agents.testing import function_call as sdk_call

from agents_loopguard import Budget, Outcome, Policy, Reason, Status
from agents_loopguard.function_calling import GuardedTool, run_chat_completions
from agents_loopguard.sdk import guarded_tool, run_guarded
from agents_loopguard.store import SQLStore, Store
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, tool_call

pytestmark = pytest.mark.timeout(120)

ADAPTERS = ("sdk", "raw", "adk")
BUDGET = Budget(model_turns=200, tool_executions=200)

Verify = Callable[[Mapping[str, Any], Any], Any]


JSON_TYPES = {"str": "string", "int": "integer"}


@dataclass
class Tool:
    """One tool body, declared once and given to both adapters; ``ran`` records each execution's arguments."""

    body: Callable[..., Any]
    kind: str = "read"
    verify: Verify | None = None
    ran: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(self.body).bind(*args, **kwargs)
        self.ran.append(dict(bound.arguments))
        return self.body(*args, **kwargs)

    def for_sdk(self) -> Any:
        @functools.wraps(self.body)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            return self(*args, **kwargs)

        if self.verify is None and self.kind == "read":  # undeclared: a plain read, as a drop-in app has it
            return function_tool(recorded)
        return guarded_tool(kind=self.kind, verify=self.verify)(recorded)  # type: ignore[arg-type]

    def for_adk(self) -> Any:
        from agents_loopguard.adk import guarded_tool as adk_tool

        @functools.wraps(self.body)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            return self(*args, **kwargs)

        if self.verify is None and self.kind == "read":  # undeclared: ADK wraps the plain function itself
            return recorded
        return adk_tool(recorded, kind=self.kind, verify=self.verify)  # type: ignore[arg-type]

    def for_raw(self) -> GuardedTool:
        params = inspect.signature(self.body).parameters
        properties = {name: {"type": JSON_TYPES[str(p.annotation)]} for name, p in params.items()}
        schema = {"type": "object", "properties": properties, "required": list(properties)}
        return GuardedTool(self.body.__name__, self, parameters=schema, kind=self.kind, verify=self.verify)  # type: ignore[arg-type]


def run(
    adapter: str, tools: list[Tool], calls: list[tuple[str, dict[str, Any]]], store: Store, **options: Any
) -> Outcome:
    """The model proposes ``calls`` one per turn, then answers "done"; the guarded run decides."""
    if adapter == "sdk":
        turns = [[sdk_call(name, args, call_id=f"c{i}")] for i, (name, args) in enumerate(calls)]
        model = ScriptedModel([*turns, [assistant_message("done")]])
        agent = Agent(name="app", model=model, tools=[t.for_sdk() for t in tools])
        return asyncio.run(run_guarded(agent, "go", budget=BUDGET, store=store, max_turns=500, **options))
    if adapter == "adk":  # Google ADK's Gemini over HTTP against the scripted Gemini endpoint
        return asyncio.run(_run_adk(tools, calls, store, **options))
    script = [tool_call(name, args) for name, args in calls] + [final_text("done")]
    with ScriptedOpenAIServer(script) as server, openai.OpenAI(base_url=server.base_url, api_key="t") as client:
        return run_chat_completions(
            client,
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "go"}],
            tools=[t.for_raw() for t in tools],
            budget=BUDGET,
            store=store,
            **options,
        )


async def _run_adk(tools: list[Tool], calls: list[tuple[str, dict[str, Any]]], store: Store, **options: Any) -> Outcome:
    from google.adk.agents import LlmAgent
    from google.adk.models.google_llm import Gemini

    from agents_loopguard.adk import run_guarded as adk_run_guarded
    from tests.support.adk import GEMINI
    from tests.support.scripted_gemini import Reply, ScriptedGeminiServer

    script = [Reply(calls=((name, args),), call_ids=(f"c{i}",)) for i, (name, args) in enumerate(calls)]
    with ScriptedGeminiServer([*script, Reply(text="done")]) as server:
        model = Gemini(model=GEMINI, base_url=server.base_url)
        agent = LlmAgent(name="app", model=model, tools=[t.for_adk() for t in tools])
        return await adk_run_guarded(agent, "go", budget=BUDGET, store=store, **options)


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def lookup() -> Tool:
    def lookup(q: str) -> str:
        """Search the catalogue."""
        return f"result for {q}"

    return Tool(lookup)


def test_r6_six_different_unverified_reads_then_an_answer_end_partial_logged_at_info(
    adapter: str, sql_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    tool = lookup()
    with SQLStore(sql_url) as store, caplog.at_level(logging.INFO, logger="agents_loopguard"):
        outcome = run(adapter, [tool], [("lookup", {"q": f"term {i}"}) for i in range(6)], store)
    assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL, 6)
    assert len(tool.ran) == 6
    (ending,) = [r for r in caplog.records if "partial/unverified_final" in r.getMessage()]
    assert ending.levelno == logging.INFO  # the ordinary ending of a drop-in app is no warning


def test_r9_a_50_page_pagination_the_application_verifies_is_not_stopped(adapter: str, sql_url: str) -> None:
    collected: list[int] = []

    def list_orders(page: int) -> dict[str, Any]:
        """One page of orders."""
        collected.append(page)
        return {"records": [f"order-{page}-{i}" for i in range(3)], "next": f"p{page + 1}" if page < 49 else None}

    def verify(args: Mapping[str, Any], out: Any) -> dict[str, Any]:  # progress: the records collected so far
        return {
            "revision": len(collected),
            "done": out["next"] is None,
            "effect": "none",
            "cursor": out["next"],
            "records": out["records"],
        }

    tool = Tool(list_orders, kind="page", verify=verify)
    with SQLStore(sql_url) as store:
        outcome = run(adapter, [tool], [("list_orders", {"page": n}) for n in range(50)], store)
    assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.COMPLETED, Reason.VALIDATED_DONE, 50)
    assert collected == list(range(50))


def test_r9_a_page_loop_that_returns_the_same_records_is_still_a_cycle(adapter: str, sql_url: str) -> None:
    def verify(args: Mapping[str, Any], out: Any) -> dict[str, Any]:
        return {"revision": 1, "done": False, "effect": "none", "cursor": None, "records": ["order-1", "order-2"]}

    def list_orders(page: int) -> str:
        """One page of orders."""
        return "the same page"

    tool = Tool(list_orders, kind="page", verify=verify)
    with SQLStore(sql_url) as store:
        outcome = run(adapter, [tool], [("list_orders", {"page": n}) for n in range(10)], store)
    assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.STOPPED, Reason.CURSOR_CYCLE, 2)


def test_r8_twenty_polls_within_the_wait_policy_complete(adapter: str, sql_url: str) -> None:
    polls: list[str] = []

    def job_status(job: str) -> str:
        """Is the job finished?"""
        polls.append(job)
        return "finished" if len(polls) == 20 else "pending"

    def verify(args: Mapping[str, Any], out: Any) -> dict[str, Any]:
        finished = out == "finished"
        return {"revision": 1 if finished else 0, "done": finished, "effect": "none", "pending": not finished}

    tool = Tool(job_status, kind="poll", verify=verify)
    with SQLStore(sql_url) as store:
        outcome = run(adapter, [tool], [("job_status", {"job": "j-1"})] * 20, store, policy=Policy(max_polls=20))
    assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.COMPLETED, Reason.VALIDATED_DONE, 20)


def test_r6_a_30_step_productive_run_completes(adapter: str, sql_url: str) -> None:
    state = {"revision": 0}

    def process_item(item: int) -> int:
        """Process one item."""
        state["revision"] += 1
        return state["revision"]

    def verify(args: Mapping[str, Any], out: Any) -> dict[str, Any]:
        return {"revision": state["revision"], "done": state["revision"] == 30, "effect": "none"}

    tool = Tool(process_item, verify=verify)
    with SQLStore(sql_url) as store:
        outcome = run(adapter, [tool], [("process_item", {"item": n}) for n in range(30)], store)
    assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.COMPLETED, Reason.VALIDATED_DONE, 30)


def test_r7_an_identical_call_loop_is_cut_by_its_third_proposal(adapter: str, sql_url: str) -> None:
    tool = lookup()
    with SQLStore(sql_url) as store:
        outcome = run(adapter, [tool], [("lookup", {"q": "same"})] * 10, store)
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    assert (outcome.used.tools, len(tool.ran), outcome.used.models) == (2, 2, 3)  # the 3rd proposal never ran


@pytest.mark.parametrize("bound", [None, 5])
def test_r6_varied_unverified_reads_are_cut_by_the_documented_configurable_bound(
    adapter: str, sql_url: str, bound: int | None
) -> None:
    tool = lookup()
    policy = Policy() if bound is None else Policy(max_unverified=bound)
    with SQLStore(sql_url) as store:
        outcome = run(adapter, [tool], [("lookup", {"q": f"v{i}"}) for i in range(80)], store, policy=policy)
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.NO_PROGRESS)
    assert outcome.used.tools == len(tool.ran) == policy.max_unverified == (bound or 64)
    assert "Policy.max_unverified" in outcome.detail
