"""Google ADK's doors beyond one agent and one message (issue 26): nested agents (``AgentTool``), a session that
gets more messages, ADK's own ``max_llm_calls``, a confirmation delivered twice, the outcome read in another
process. Each counts real side effects: the requests the scripted Gemini server received, the tool bodies run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.models.google_llm import Gemini
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.agent_tool import AgentTool
from google.genai import types

from agents_loopguard import Budget, Outcome, Reason, Status
from agents_loopguard.adk import LoopGuardPlugin, guarded_tool, run_guarded
from agents_loopguard.store import Store
from tests.support import forked
from tests.support.adk import GEMINI
from tests.support.scripted_gemini import Dynamic, Reply, ScriptedGeminiServer
from tests.support.wire import gemini_http_options

pytestmark = pytest.mark.timeout(120)
JSON = dict[str, Any]


def offered(body: JSON) -> set[str]:
    """The function names a request offers."""
    return {d["name"] for tool in body.get("tools", []) for d in tool.get("functionDeclarations", [])}


def answered(body: JSON, name: str) -> bool:
    """True when the request's last content answers a call of ``name`` (the model reads its result)."""
    contents = body.get("contents", [])
    parts = contents[-1].get("parts", []) if contents else []
    return any(part.get("functionResponse", {}).get("name") == name for part in parts)


class Shop:
    """A parent agent ``clerk`` with an ``AgentTool`` around the agent ``helper``, which looks orders up; both on
    ADK's ``Gemini`` over HTTP against one scripted server. ``stuck``: the helper never answers (a new lookup every
    turn) and the clerk calls the helper again and again: what only a budget ends. Otherwise each model answers
    once it read its tool's result."""

    def __init__(self, server: ScriptedGeminiServer, *, stuck: bool = False) -> None:
        self.bodies: list[int] = []
        self.stuck = stuck
        model = lambda: Gemini(model=GEMINI, base_url=server.base_url, client_kwargs=gemini_http_options())  # noqa: E731

        def lookup(order: int) -> str:
            """Look an order up."""
            self.bodies.append(order)
            return f"order {order} shipped"

        verify = lambda args, out: {"revision": len(self.bodies), "done": False, "effect": "none"}  # noqa: E731
        self.helper = LlmAgent(
            name="helper", description="Finds orders.", model=model(), tools=[guarded_tool(lookup, verify=verify)]
        )
        self.clerk = LlmAgent(name="clerk", model=model(), tools=[AgentTool(self.helper)])

    def respond(self, body: JSON) -> Reply:
        if "lookup" in offered(body):  # the helper
            if answered(body, "lookup") and not self.stuck:
                return Reply(text=f"helper: order {self.bodies[-1]} shipped")
            return Reply(calls=(("lookup", {"order": len(self.bodies) + 1}),))
        if answered(body, "helper") and not self.stuck:
            return Reply(text="clerk: your order shipped")
        return Reply(calls=(("helper", {"request": "find my order"}),))


@contextlib.contextmanager
def serve(shop: Callable[..., Shop], **kw: Any) -> Iterator[tuple[ScriptedGeminiServer, Shop]]:
    holder: list[Shop] = []
    with ScriptedGeminiServer([Dynamic(lambda body: holder[0].respond(body)) for _ in range(60)]) as server:
        holder.append(shop(server, **kw))
        yield server, holder[0]


def test_an_agent_tool_runs_under_the_parents_task_and_budget(store: Store) -> None:
    """R19, issue 26 item 1: ADK's ``AgentTool`` runs the wrapped agent in a new ``Runner`` and session with the
    parent's plugins. Each call of it used to be a task of its own with a full budget: with ``Budget(model_turns=3,
    tool_executions=2)`` the server received 9 requests and 6 executions ran across 3 tasks. The nested run is the
    parent's: the server receives exactly the 3 model turns the task counts, no body runs unreserved, and the
    store holds one task."""
    with serve(Shop, stuck=True) as (server, shop):
        budget = Budget(model_turns=3, tool_executions=2)
        outcome = asyncio.run(run_guarded(shop.clerk, "where is my order?", budget=budget, store=store))
        assert len(server.requests) == outcome.used.models == 3
        assert outcome.used.tools == 2 and len(shop.bodies) == 1  # the helper call and one lookup inside it
        assert outcome.status is Status.STOPPED and outcome.reason is Reason.TOOL_BUDGET
        assert [t.task_id for t in store.tasks()] == [outcome.task_id]


def test_a_nested_run_never_concludes_the_parents_task(store: Store) -> None:
    """R19: with an explicit ``task_id`` the nested run used to conclude the parent's task with the helper's text
    (``partial/unverified_final``, the parent never got its second turn). The parent now reads the helper's answer
    and gives its own: 4 requests (2 each), both bodies counted, the final answer the clerk's."""
    with serve(Shop) as (server, shop):
        budget = Budget(model_turns=6, tool_executions=4)
        outcome = asyncio.run(run_guarded(shop.clerk, "where?", budget=budget, store=store, task_id="ticket-9"))
        assert (outcome.status, outcome.reason, outcome.final_output) == (
            Status.PARTIAL,
            Reason.UNVERIFIED_FINAL,
            "clerk: your order shipped",
        )
        assert len(server.requests) == outcome.used.models == 4 and outcome.task_id == "ticket-9"
        assert outcome.used.tools == 2 and shop.bodies == [1]


async def _chat(runner: Runner, session_id: str, message: str) -> list[str]:
    content = types.Content(role="user", parts=[types.Part(text=message)])
    texts = []
    async for event in runner.run_async(user_id="u", session_id=session_id, new_message=content):
        if event.author == "clerk" and event.content and event.content.parts:
            texts.extend(p.text for p in event.content.parts if p.text)
    return texts


def test_an_adk_session_with_an_agent_tool_answers_every_message_within_its_budget(store: Store) -> None:
    """Issue 26, done when: an ADK session with an ``AgentTool`` works as its users expect, budgets holding. Each
    message is a run of its own on the session's task (the clerk asks the helper, the helper looks the order up,
    both answer: 4 requests, 2 executions); three messages get three answers under ``Budget(model_turns=12,
    tool_executions=6)``; the fourth finds the session's budget spent and is answered without a request."""
    with serve(Shop) as (server, shop):
        plugin = LoopGuardPlugin(budget=Budget(model_turns=12, tool_executions=6), store=store)
        runner = Runner(
            app=App(name="shop", root_agent=shop.clerk, plugins=[plugin]), session_service=InMemorySessionService()
        )

        async def main() -> list[tuple[list[str], Outcome | None]]:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            said = []
            for message in ("where is order 1?", "and order 2?", "and order 3?", "and order 4?"):
                said.append((await _chat(runner, session.id, message), plugin.outcome(session.id)))
            return said

        said = asyncio.run(main())
        for texts, outcome in said[:3]:
            assert texts[-1:] == ["clerk: your order shipped"]
            assert outcome is not None and outcome.reason is Reason.UNVERIFIED_FINAL
        assert [o.used.models for _t, o in said[:3] if o] == [4, 8, 12] and shop.bodies == [1, 2, 3]
        last = said[3][1]
        assert last is not None and (last.status, last.reason) == (Status.STOPPED, Reason.MODEL_BUDGET)
        assert len(server.requests) == 12 == last.used.models and "model_budget" in said[3][0][-1]


def test_max_llm_calls_beside_the_guard_ends_with_an_outcome_and_no_traceback(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26 item 6: ADK's ``RunConfig(max_llm_calls=3)`` kept beside the guard used to raise ``RuntimeError:
    Error in plugin 'loopguard' during 'before_model_callback'`` out of the application's ``Runner`` with three
    logged tracebacks. The run ends ``stopped/max_turns`` with the 3 requests the server received, quietly."""
    with serve(Shop, stuck=True) as (server, shop):
        plugin = LoopGuardPlugin(budget=Budget(model_turns=20, tool_executions=20), store=store)
        runner = Runner(
            app=App(name="shop", root_agent=shop.helper, plugins=[plugin]), session_service=InMemorySessionService()
        )

        async def main() -> Outcome | None:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            content = types.Content(role="user", parts=[types.Part(text="go")])
            config = RunConfig(max_llm_calls=3)
            async for _event in runner.run_async(
                user_id="u", session_id=session.id, new_message=content, run_config=config
            ):
                pass
            return plugin.outcome(session.id)

        with caplog.at_level(logging.WARNING):
            outcome = asyncio.run(main())
        assert outcome is not None and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MAX_TURNS)
        assert len(server.requests) == outcome.used.models == 3 and len(shop.bodies) == 3
        assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


@pytest.mark.slow
def test_the_stored_outcome_is_read_from_a_plugin_in_another_process(tmp_path: Any) -> None:
    """Issue 26 item 6: ``plugin.outcome(session_id)`` used to be ``None`` in a process that did not run the session
    (and the application crashed on it): it is read from the store."""
    import os
    import sys

    from tests.support.processes import ROOT

    url = f"sqlite:///{tmp_path / 'loopguard.db'}"
    code = (
        "import asyncio, json, sys\n"
        "from agents_loopguard import Budget\n"
        "from agents_loopguard.adk import LoopGuardPlugin, run_guarded\n"
        "from agents_loopguard.adk.testing import ScriptedLlm, text\n"
        "from agents_loopguard.store import SQLStore\n"
        "from google.adk.agents import LlmAgent\n"
        "store = SQLStore(sys.argv[1])\n"
        "if sys.argv[2] == 'run':\n"
        "    agent = LlmAgent(name='clerk', model=ScriptedLlm([text('shipped')]))\n"
        "    o = asyncio.run(run_guarded(agent, 'go', session_id='s-7', budget=Budget(3, 3), store=store))\n"
        "else:\n"
        "    o = LoopGuardPlugin(budget=Budget(3, 3), store=store).outcome('s-7')\n"
        "print(json.dumps(None if o is None else [o.task_id, str(o.status), o.final_output, o.used.models]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [
        forked.run(
            [sys.executable, "-c", code, url, step], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
        )
        for step in ("run", "read")
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-2000:] for r in runs]
    ran, read = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert ran == read == ["s-7", "partial", "shipped", 1]


def test_a_loop_agent_that_exits_ends_with_an_outcome_not_a_fatal_error(store: Store) -> None:
    """Issue 26: a ``LoopAgent`` whose sub-agent calls ``exit_loop`` (its last model answer is that call, no text)
    ended the task ``stopped/fatal`` ("the run ended without an answer"). ADK ended the run as designed: the
    outcome is ``partial/unverified_final`` (the loop's own end proves nothing), every call counted."""
    from google.adk.agents import LoopAgent
    from google.adk.tools.exit_loop_tool import exit_loop

    looked: list[int] = []

    def lookup(order: int) -> str:
        """Look an order up."""
        looked.append(order)
        return "shipped"

    script = [Reply(calls=(("lookup", {"order": 1}),)), Reply(calls=(("exit_loop", {}),))]
    with ScriptedGeminiServer(script) as server:
        model = Gemini(model=GEMINI, base_url=server.base_url, client_kwargs=gemini_http_options())
        worker = LlmAgent(name="worker", model=model, tools=[guarded_tool(lookup), exit_loop])
        loop = LoopAgent(name="loop", sub_agents=[worker], max_iterations=5)
        outcome = asyncio.run(run_guarded(loop, "go", budget=Budget(6, 6), store=store))
        assert (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)
        assert len(server.requests) == outcome.used.models == 2 and looked == [1]
        assert outcome.used.tools == 2  # the lookup and exit_loop, each reserved


def test_run_guarded_inside_a_guarded_tool_is_refused_with_the_fix(store: Store) -> None:
    """A tool body that calls ``run_guarded`` would start a task of its own with a budget of its own: refused with
    the fix named (``AgentTool`` or the application's ``Runner`` share the parent's task). The model reads the
    refusal as the tool's failure; no request of the inner agent leaves."""
    with serve(Shop) as (server, shop):

        async def delegate(question: str) -> str:
            """Ask the helper agent."""
            inner = await run_guarded(shop.helper, question, budget=Budget(9, 9), store=store)
            return str(inner.final_output)

        steps = [Reply(calls=(("delegate", {"question": "order?"}),)), Reply(text="could not ask")]
        with ScriptedGeminiServer(steps) as own:
            model = Gemini(model=GEMINI, base_url=own.base_url, client_kwargs=gemini_http_options())
            clerk = LlmAgent(name="clerk", model=model, tools=[delegate])
            outcome = asyncio.run(run_guarded(clerk, "go", budget=Budget(4, 4), store=store, on_refusal="continue"))
            told = [r.function_responses for r in own.requests][-1]
        assert server.requests == [] and shop.bodies == []
        assert "wrap it in AgentTool" in json.dumps(told)
        assert outcome.used.models == len(own.requests) == 2
        assert [t.task_id for t in store.tasks()] == [outcome.task_id]


def test_an_invocation_resumed_after_a_crash_in_a_write_never_sends_it_twice(store: Store) -> None:
    """``ResumabilityConfig`` is at least once: an invocation interrupted inside a write's body (its task cancelled
    as a crash leaves it: ADK runs no callback) and resumed by its id runs the unanswered call again. The ledger
    holds the write ``unknown``: the second attempt is refused (``needs_reconciliation/unknown_commit``), the
    receiver saw one refund."""
    from google.adk.apps import ResumabilityConfig

    refunds: list[int] = []

    async def main() -> Outcome | None:
        started = asyncio.Event()

        async def refund(order: int) -> str:
            """Refund an order."""
            refunds.append(order)
            started.set()
            await asyncio.sleep(3600)  # the process dies here
            return "refunded"

        tool = guarded_tool(
            refund,
            kind="write",
            operation_id=lambda a: f"refund-{a['order']}",
            verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
        )
        with ScriptedGeminiServer([Reply(calls=(("refund", {"order": 1}),)), Reply(text="done")]) as server:
            model = Gemini(model=GEMINI, base_url=server.base_url, client_kwargs=gemini_http_options())
            agent = LlmAgent(name="clerk", model=model, tools=[tool])
            service = InMemorySessionService()
            resumable = ResumabilityConfig(is_resumable=True)

            def runner(plugin: LoopGuardPlugin) -> Runner:
                app = App(name="shop", root_agent=agent, plugins=[plugin], resumability_config=resumable)
                return Runner(app=app, session_service=service)

            budget = Budget(model_turns=4, tool_executions=4)
            session = await service.create_session(app_name="shop", user_id="u")
            seen: list[str] = []

            async def first() -> None:
                content = types.Content(role="user", parts=[types.Part(text="refund order 1")])
                plugin = LoopGuardPlugin(budget=budget, store=store, task_id="crashed")
                async for event in runner(plugin).run_async(user_id="u", session_id=session.id, new_message=content):
                    seen.append(event.invocation_id)

            running = asyncio.create_task(first())
            await started.wait()
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            plugin = LoopGuardPlugin(budget=budget, store=store, task_id="crashed")  # the process that resumes it
            async for _event in runner(plugin).run_async(user_id="u", session_id=session.id, invocation_id=seen[0]):
                pass
            assert len(server.requests) == 1  # the resumed call was refused: no request after it either
            return plugin.outcome(session.id)

    outcome = asyncio.run(main())
    assert outcome is not None and (outcome.status, outcome.reason) == (
        Status.NEEDS_RECONCILIATION,
        Reason.UNKNOWN_COMMIT,
    )
    assert refunds == [1] and outcome.used.tools == 1


def test_the_same_confirmation_delivered_twice_to_your_own_runner_is_a_quiet_no_op(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26 item 6: ADK alone takes a confirmation answered twice as a no-op; under the plugin the second
    delivery raised ``RuntimeError: Error in plugin 'loopguard' during 'before_run_callback'`` out of the
    application's own ``Runner``. It is answered with the task's outcome: no exception, nothing logged as an
    error, the refund ran once, no request sent."""
    from agents_loopguard.adk.claims import CONFIRMATION

    refunds: list[int] = []

    def refund(order: int) -> str:
        """Refund an order."""
        refunds.append(order)
        return "refunded"

    tool = guarded_tool(
        refund,
        kind="write",
        operation_id=lambda a: f"refund-{a['order']}",
        verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
        require_confirmation=True,
    )
    steps = [Reply(calls=(("refund", {"order": 42}),)), Reply(text="Refunded.")]
    with ScriptedGeminiServer(steps) as server:
        model = Gemini(model=GEMINI, base_url=server.base_url, client_kwargs=gemini_http_options())
        plugin = LoopGuardPlugin(budget=Budget(4, 2), store=store)
        runner = Runner(
            app=App(name="shop", root_agent=LlmAgent(name="clerk", model=model, tools=[tool]), plugins=[plugin]),
            session_service=InMemorySessionService(),
        )

        async def main() -> list[Outcome | None]:
            session = await runner.session_service.create_session(app_name="shop", user_id="u")
            await _chat(runner, session.id, "Refund order 42.")
            seen = [plugin.outcome(session.id)]
            events = (
                await runner.session_service.get_session(app_name="shop", user_id="u", session_id=session.id)
            ).events
            asked = [c.id for e in events for c in e.get_function_calls() if c.name == CONFIRMATION][-1]
            answer = types.FunctionResponse(id=asked, name=CONFIRMATION, response={"confirmed": True})
            for _ in range(2):
                content = types.Content(role="user", parts=[types.Part(function_response=answer)])
                async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=content):
                    pass
                seen.append(plugin.outcome(session.id))
            return seen

        with caplog.at_level(logging.WARNING):
            paused, resumed, again = asyncio.run(main())
        assert paused is not None and paused.reason is Reason.APPROVAL
        assert resumed is not None and (resumed.status, resumed.reason) == (Status.COMPLETED, Reason.VALIDATED_DONE)
        assert again is not None and (again.status, again.used) == (resumed.status, resumed.used)
        assert refunds == [42] and len(server.requests) == 2
        assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
