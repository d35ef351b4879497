"""The Google ADK adapter beyond the run-rule matrix: the plugin in the application's own ``Runner``, ADK's own
limits and callbacks under the guard (issue 19's measurements), and the example."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent, LoopAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.models.google_llm import Gemini
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from agents_loopguard import Budget, MemoryStore, Reason, Status
from agents_loopguard.adk import LoopGuardPlugin, guarded_tool, run_guarded
from agents_loopguard.adk.testing import ScriptedLlm, calls, text
from tests.support.adk import GEMINI
from tests.support.scripted_gemini import ScriptedGeminiServer, error
from tests.support.scripted_gemini import calls as gemini_calls
from tests.support.scripted_gemini import text as gemini_text

pytestmark = pytest.mark.timeout(60)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ran: list[int] = []


def lookup(order: int) -> str:
    """Look an order up."""
    ran.append(order)
    return f"order {order} shipped"


def counting(args: dict[str, Any], out: Any) -> dict[str, Any]:
    return {"revision": len(ran), "done": False, "effect": "none"}


def sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on its own event loop (the suite has no async plugin)."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@sync
async def test_the_plugin_in_your_own_runner_reads_the_outcome_per_session() -> None:
    """The plugin in ``App(plugins=[...])`` guards the application's own ``Runner.run_async`` over real HTTP; the
    outcome is read from the plugin by session; a second message to the session is answered, a run of its own on
    the same task: the counters go on (issue 26: the session used to stop answering after its first run)."""
    store = MemoryStore()
    steps = [gemini_calls(("lookup", {"order": 1})), gemini_text("shipped"), gemini_text("still shipped")]
    with ScriptedGeminiServer(steps) as server:
        plugin = LoopGuardPlugin(budget=Budget(model_turns=5, tool_executions=3), store=store)
        agent = LlmAgent(
            name="clerk", model=Gemini(model=GEMINI, base_url=server.base_url), tools=[guarded_tool(lookup)]
        )
        runner = Runner(
            app=App(name="shop", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService()
        )
        session = await runner.session_service.create_session(app_name="shop", user_id="u")
        seen = []
        for message in ("where is order 1?", "and now?"):
            content = types.Content(role="user", parts=[types.Part(text=message)])
            async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=content):
                pass
            outcome = plugin.outcome(session.id)
            assert outcome is not None and outcome.task_id == session.id
            seen.append((outcome.status, outcome.reason, outcome.used.models, outcome.final_output))
        assert seen == [
            (Status.PARTIAL, Reason.UNVERIFIED_FINAL, 2, "shipped"),
            (Status.PARTIAL, Reason.UNVERIFIED_FINAL, 3, "still shipped"),
        ]
        assert len(server.requests) == 3 and ran == [1]
    kinds = [t.kind for t in store.transitions(session.id)]
    assert kinds == ["message"]  # the second message reopened the task, a recorded transition


@sync
async def test_a_loop_agent_around_a_stuck_model_ends_bounded() -> None:
    """Issue 19: a ``LoopAgent`` (no ``max_iterations``) around a model stuck on one call never ends its first
    iteration in ADK (only ``max_llm_calls``, 500, would). Under the plugin each cycle's calls count, the identical
    call is refused before it runs, and the loop ends."""
    stuck = ScriptedLlm([calls(("lookup", {"order": 7})) for _ in range(40)])
    same = guarded_tool(lookup, verify=lambda a, out: {"revision": 1, "done": False, "effect": "none"})
    agent = LlmAgent(name="worker", model=stuck, tools=[same])
    loop = LoopAgent(name="loop", sub_agents=[agent])
    outcome = await run_guarded(loop, "go", budget=Budget(model_turns=30, tool_executions=30), store=MemoryStore())
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    assert len(stuck.requests) == outcome.used.models < 10 and len(ran) == outcome.used.tools


@sync
async def test_an_answer_from_a_before_model_callback_is_counted() -> None:
    """Issue 19: ADK never counts an answer its ``before_model_callback`` gives (``max_llm_calls`` is incremented
    after it). The plugin runs before the agent's callbacks: every model call the agent makes is reserved, answered
    by the model or by a callback, so a callback that keeps answering cannot outrun the budget."""
    answers = 0

    def cached(callback_context: Any, llm_request: Any) -> Any:
        nonlocal answers
        answers += 1
        return calls(("lookup", {"order": answers}))

    agent = LlmAgent(
        name="clerk",
        model=ScriptedLlm([]),
        tools=[guarded_tool(lookup, verify=counting)],
        before_model_callback=cached,
    )
    outcome = await run_guarded(agent, "go", budget=Budget(model_turns=4, tool_executions=10), store=MemoryStore())
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_BUDGET)
    assert outcome.used.models == answers == 4 and ran == [1, 2, 3, 4]


@sync
async def test_max_llm_calls_ends_with_max_turns_and_the_budget_spans_invocations() -> None:
    """ADK's ``RunConfig.max_llm_calls`` lives per invocation; hit, it ends the task ``stopped/max_turns`` (not a
    programming error), and the counters are the task's: the fourth call, which ADK refuses, is never reserved, so
    the task counts exactly the calls the model received."""
    model = ScriptedLlm([calls(("lookup", {"order": i})) for i in range(1, 10)])
    agent = LlmAgent(name="clerk", model=model, tools=[guarded_tool(lookup, verify=counting)])
    outcome = await run_guarded(
        agent,
        "go",
        run_config=RunConfig(max_llm_calls=3),
        budget=Budget(model_turns=20, tool_executions=20),
        store=MemoryStore(),
    )
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MAX_TURNS)
    assert (outcome.used.models, len(model.requests)) == (3, 3) and ran == [1, 2, 3]


@sync
async def test_an_invocation_whose_task_the_guard_ended_runs_nothing() -> None:
    """A task the guard ended (here ``stopped/same_call``) stays ended: the next message is answered with its
    outcome, no model call, no tool; so is every message with ``conversation=False``, whatever the end."""
    store = MemoryStore()
    budget = Budget(model_turns=6, tool_executions=6)
    stuck = ScriptedLlm([calls(("lookup", {"order": 5})) for _ in range(3)])
    agent = LlmAgent(name="a", model=stuck, tools=[guarded_tool(lookup)])
    first = await run_guarded(agent, "go", budget=budget, store=store, task_id="t")
    assert (first.status, first.reason) == (Status.STOPPED, Reason.SAME_CALL)
    silent = ScriptedLlm([])
    again = await run_guarded(LlmAgent(name="a", model=silent), "go", budget=budget, store=store, task_id="t")
    assert (again.status, again.reason, again.used) == (
        first.status,
        first.reason,
        first.used,
    ) and silent.requests == []

    answered = await run_guarded(LlmAgent(name="a", model=ScriptedLlm([text("hi")])), "go", budget=budget, store=store)
    plugin = LoopGuardPlugin(budget=budget, store=store, task_id=answered.task_id, conversation=False)
    runner = Runner(
        app=App(name="shop", root_agent=LlmAgent(name="a", model=silent), plugins=[plugin]),
        session_service=InMemorySessionService(),
    )
    session = await runner.session_service.create_session(app_name="shop", user_id="u")
    content = types.Content(role="user", parts=[types.Part(text="more?")])
    async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=content):
        pass
    kept = plugin.outcome(session.id)
    assert kept is not None and (kept.reason, kept.used) == (Reason.UNVERIFIED_FINAL, answered.used)
    assert silent.requests == []


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_loop_agent_example_runs_as_documented() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "adk_loop_agent.py")], capture_output=True, text=True, timeout=120, check=True
    )
    assert "outcome: stopped/same_call" in done.stdout
    assert "model calls: 3 (the model was asked 3 times)" in done.stdout and "searches executed: 2" in done.stdout


def test_a_model_that_retries_inside_one_call_is_refused_before_anything_runs() -> None:
    """R1, R2: ``Gemini(retry_options=...)`` retries inside one ADK call, where no callback sees the attempts: the
    run is refused at its start (nothing sent), rather than let requests leave unreserved."""
    with ScriptedGeminiServer([gemini_text("never")]) as server:
        retrying = Gemini(
            model=GEMINI, base_url=server.base_url, retry_options=types.HttpRetryOptions(attempts=3, initial_delay=0)
        )
        agent = LlmAgent(name="clerk", model=retrying)
        with pytest.raises(ValueError, match="retries inside one call"):
            asyncio.run(run_guarded(agent, "go", budget=Budget(3, 3), store=MemoryStore()))
        assert server.requests == []


def test_every_request_is_counted_as_the_server_saw_it() -> None:
    """Issue 19, over real HTTP: a failing request counts once, as the server saw it (no hidden client retry),
    and ends the run with its verdict; the outcome's model count is the server's request count."""
    with ScriptedGeminiServer([gemini_calls(("lookup", {"order": 1})), error(503)]) as server:
        agent = LlmAgent(
            name="clerk", model=Gemini(model=GEMINI, base_url=server.base_url), tools=[guarded_tool(lookup)]
        )
        outcome = asyncio.run(run_guarded(agent, "go", budget=Budget(5, 5), store=MemoryStore()))
        assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_ERROR)
        assert outcome.used.models == len(server.requests) == 2 and ran == [1]


def test_a_write_whose_answer_was_lost_is_never_sent_again(tmp_path: Path) -> None:
    """R10 over HTTP, on a SQLite file: the write's answer is lost (its body raises after the receiver applied it):
    ``needs_reconciliation``; running the task again refuses it before the body runs (``unknown_commit``)."""
    from agents_loopguard.store import SQLStore

    applied: list[int] = []

    def confirm(order: int) -> str:
        """Confirm an order."""
        applied.append(order)
        raise ConnectionResetError("the receiver's answer was lost")

    tool = guarded_tool(
        confirm,
        kind="write",
        operation_id=lambda a: f"confirm-{a['order']}",
        verify=lambda a, out: {"revision": 1, "done": True, "effect": "unknown"},
    )
    store = SQLStore(f"sqlite:///{tmp_path / 'loopguard.db'}")
    try:
        outcomes = []
        for attempt in range(2):
            with ScriptedGeminiServer([gemini_calls(("confirm", {"order": 42})), gemini_text("x")]) as server:
                agent = LlmAgent(name="clerk", model=Gemini(model=GEMINI, base_url=server.base_url), tools=[tool])
                outcomes.append(
                    asyncio.run(run_guarded(agent, "go", budget=Budget(5, 5), store=store, task_id=f"w-{attempt}"))
                )
        first, second = outcomes
        assert first.status is Status.NEEDS_RECONCILIATION and first.operation_id == "confirm-42"
        assert (second.status, second.reason, second.used.tools) == (
            Status.NEEDS_RECONCILIATION,
            Reason.UNKNOWN_COMMIT,
            0,
        )
        assert applied == [42]
    finally:
        store.close()


def test_the_stop_mark_is_honoured_before_the_next_call() -> None:
    """R3 over HTTP: a stop requested while a tool runs (an operator, another process) is seen before the next
    model call: nothing more is sent, ``stopped/stop_requested``."""
    store = MemoryStore()

    def check(order: int) -> str:
        """Check an order."""
        ran.append(order)
        store.request_stop("t-stop", "operator")
        return "checked"

    with ScriptedGeminiServer([gemini_calls(("check", {"order": 1})), gemini_text("never")]) as server:
        agent = LlmAgent(
            name="clerk", model=Gemini(model=GEMINI, base_url=server.base_url), tools=[guarded_tool(check)]
        )
        outcome = asyncio.run(run_guarded(agent, "go", budget=Budget(5, 5), store=store, task_id="t-stop"))
        assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.STOP_REQUESTED)
        assert len(server.requests) == outcome.used.models == 1 and ran == [1]


@sync
async def test_per_agent_callbacks_guard_the_same_rules_as_the_plugin() -> None:
    """For those who prefer ``LlmAgent(before_model_callback=...)``: ``agent_callbacks(plugin)`` forwards to the
    same rules; the identical-call loop is cut at its third proposal, the outcome read from the plugin."""
    from agents_loopguard.adk import agent_callbacks

    guard = LoopGuardPlugin(budget=Budget(model_turns=10, tool_executions=10), store=MemoryStore())
    model = ScriptedLlm([calls(("lookup", {"order": 3})) for _ in range(8)])
    agent = LlmAgent(name="clerk", model=model, tools=[guarded_tool(lookup)], **agent_callbacks(guard))
    runner = Runner(app=App(name="shop", root_agent=agent), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="shop", user_id="u")
    content = types.Content(role="user", parts=[types.Part(text="go")])
    async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=content):
        pass
    outcome = guard.outcome(session.id)
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    assert ran == [3, 3] and outcome.used.tools == 2 and len(model.requests) == outcome.used.models == 3
