"""The Agents SDK's own idioms keep every guarantee (R13, R2): the SDK's approval door (``state.approve()`` then a
run with the state), and the default store shared with the ``loopguard`` command.

Each test asserts on what really ran (a side-effect journal), on the stored task, and on the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import agents
import pytest
from agents import Agent, RunState
from agents.testing import ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, Reason, Status
from agents_loopguard.ops.approvals import DecisionError, ResumeError
from agents_loopguard.sdk import guarded_tool, run_guarded
from agents_loopguard.store import PauseAlreadyResumed, SQLStore, Store
from tests.support.cli import in_process
from tests.support.sdk import guarded_outcome

pytestmark = pytest.mark.timeout(90)
agents.set_tracing_disabled(True)

sent: list[str] = []


@pytest.fixture(autouse=True)
def _clean() -> None:
    sent.clear()


@guarded_tool(
    kind="write",
    operation_id=lambda a: f"refund-order-{a['order']}",
    verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
    needs_approval=True,
)
def refund(order: int) -> str:
    """Refund an order (a human approves it)."""
    sent.append(f"refund-{order}")
    return f"refunded {order}"


def clerk(*turns: list[Any]) -> Agent[Any]:
    return Agent(name="clerk", model=ScriptedModel(list(turns)), tools=[refund])


BUDGET = Budget(model_turns=6, tool_executions=4)
REFUND_5 = [function_call("refund", {"order": 5}, call_id="c1")]


async def paused(store: Store, task_id: str, agent: Agent[Any]) -> Any:
    outcome = await run_guarded(agent, "refund order 5", budget=BUDGET, store=store, task_id=task_id)
    assert (outcome.status, outcome.reason) == (Status.NEEDS_HUMAN, Reason.APPROVAL)
    return outcome


def test_r13_state_approve_then_run_guarded_continues_the_stored_pause_with_its_counters(store: Store) -> None:
    async def main() -> tuple[Any, Any, RunState[Any]]:
        agent = clerk(REFUND_5, [assistant_message("Refunded.")])
        first = await paused(store, "t-native", agent)
        state = first.result.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        second = await run_guarded(agent, state, task_id="t-native", store=store, who="ana")
        return first, second, state

    first, second, state = asyncio.run(main())
    assert sent == ["refund-5"]  # approved once, executed once
    assert (second.status, second.reason) == (Status.COMPLETED, Reason.VALIDATED_DONE)
    assert (first.used.models, second.used.models, second.used.tools) == (1, 2, 1)  # counters continue
    assert second.result is not None and second.result.final_output == "Refunded."
    (pause,) = store.pauses("t-native")
    assert pause.status == "resumed" and pause.decisions == {"c1": "approve"}
    (transition,) = store.transitions("t-native")
    assert (transition.kind, transition.who, transition.pause_id) == ("resume", "ana", pause.pause_id)

    async def again() -> Any:  # the same approved state a second time: the pause resumes at most once
        return await run_guarded(clerk([assistant_message("x")]), state, task_id="t-native", store=store)

    with pytest.raises(PauseAlreadyResumed):
        asyncio.run(again())
    assert sent == ["refund-5"]


def test_r13_a_rejected_state_records_the_rejection_and_runs_nothing(store: Store) -> None:
    async def main() -> Any:
        agent = clerk(REFUND_5, [assistant_message("Not refunded.")])
        first = await paused(store, "t-reject", agent)
        state = first.result.to_state()
        for item in state.get_interruptions():
            state.reject(item)
        return await run_guarded(agent, state, task_id="t-reject", store=store)

    outcome = asyncio.run(main())
    assert sent == [] and outcome.used.tools == 0 and outcome.used.models == 2
    assert store.pauses("t-reject")[0].decisions == {"c1": "reject"}


@pytest.mark.parametrize("where", ["new task id", "another task", "no task id, other store"])
def test_r13_a_paused_state_under_another_or_a_new_task_is_refused_never_a_fresh_budget(
    store: Store, where: str
) -> None:
    async def main() -> None:
        agent = clerk(REFUND_5, [assistant_message("x")])
        first = await paused(store, "t-owner", agent)
        await run_guarded(clerk([assistant_message("y")]), "hello", budget=BUDGET, store=store, task_id="t-other")
        state = first.result.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        if where == "new task id":
            await run_guarded(agent, state, task_id="t-fresh", budget=Budget(100, 100), store=store)
        elif where == "another task":
            await run_guarded(agent, state, task_id="t-other", store=store)
        else:  # the default store: the pause is not there
            await run_guarded(agent, state, budget=Budget(100, 100))

    with pytest.raises(ResumeError) as refused:
        asyncio.run(main())
    message = str(refused.value)
    assert "nothing was run" in message and "resume_guarded" in message
    if where == "another task":
        assert "belong to pause" in message and "'t-owner'" in message
    assert sent == []
    assert store.task("t-fresh") is None  # no fresh task, no fresh budget
    assert store.pauses("t-owner")[0].status == "pending"


def test_r13_a_state_with_an_undecided_call_is_refused_before_the_claim(store: Store) -> None:
    async def main() -> None:
        agent = clerk(REFUND_5)
        first = await paused(store, "t-undecided", agent)
        await run_guarded(agent, first.result.to_state(), task_id="t-undecided", store=store)

    with pytest.raises(DecisionError, match="has no decision in the run state"):
        asyncio.run(main())
    assert store.pauses("t-undecided")[0].status == "pending" and sent == []


def test_r13_the_streamed_door_continues_the_pause_too(store: Store) -> None:
    async def main() -> Any:
        agent = clerk(REFUND_5, [assistant_message("Refunded.")])
        first = await paused(store, "t-stream", agent)
        state = first.result.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        return await guarded_outcome(agent, state, stream=True, task_id="t-stream", store=store)

    outcome = asyncio.run(main())
    assert (outcome.status, outcome.used.models, sent) == (Status.COMPLETED, 2, ["refund-5"])


def test_a_run_guarded_without_store_is_in_the_store_the_loopguard_command_reads(tmp_path: Any) -> None:
    """One default store: the SDK adapter without ``store=``, its pause, and ``loopguard show`` agree."""
    url = os.environ["LOOPGUARD_DATABASE_URL"]  # the per-test default store (see conftest.py)
    outcome = asyncio.run(run_guarded(clerk(REFUND_5), "refund 5", budget=BUDGET, task_id="ticket-1042"))
    assert outcome.pause_id is not None
    with SQLStore(url) as opened:
        task = opened.task("ticket-1042")
        assert task is not None and task.status == "needs_human"
        assert opened.pause(outcome.pause_id) is not None
    shown = in_process(["--json", "show", "ticket-1042"], env={"LOOPGUARD_DATABASE_URL": url})
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["task"]["status"] == "needs_human"


# --- the whole graph counts (R2): agents as tools, runs started inside tool bodies ------------------------------


looked: list[str] = []


@agents.function_tool
def lookup(n: int) -> str:
    """Look something up (a plain SDK tool nobody declared)."""
    looked.append(f"lookup-{n}")
    return f"page {n}"


def researcher(calls: int) -> Agent[Any]:
    """An agent that calls its plain tool ``calls`` times (different arguments each time), then answers."""
    turns = [[function_call("lookup", {"n": n}, call_id=f"l{n}")] for n in range(calls)]
    return Agent(name="researcher", model=ScriptedModel([*turns, [assistant_message("found it")]]), tools=[lookup])


@pytest.mark.parametrize("with_run_config", [False, True], ids=["as_tool", "as_tool(run_config=...)"])
def test_r2_an_agent_used_as_a_tool_counts_its_model_turns_and_tool_bodies_against_the_task(
    with_run_config: bool,
) -> None:
    looked.clear()
    inner = researcher(8)
    tool = inner.as_tool("research", "Research a question.", run_config=agents.RunConfig() if with_run_config else None)
    outer = Agent(
        name="boss",
        model=ScriptedModel([[function_call("research", {"input": "q"}, call_id="r1")], [assistant_message("ok")]]),
        tools=[tool],
    )
    outcome = asyncio.run(run_guarded(outer, "go", budget=Budget(model_turns=20, tool_executions=3)))
    # the nested agent's plain tool ran only within the task's budget (it used to run 8 times)
    assert len(looked) == 2 and outcome.used.tools == 3  # the research call itself, then two lookups
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.TOOL_BUDGET)
    assert outcome.used.models >= 3  # the outer turn and the nested agent's turns, all reserved


def test_r2_a_runner_run_inside_a_guarded_tool_body_is_guarded_by_the_same_task() -> None:
    looked.clear()

    @guarded_tool
    async def delegate(question: str) -> str:
        """Ask the researcher."""
        result = await agents.Runner.run(researcher(5), question)
        return str(result.final_output)

    outer = Agent(
        name="boss",
        model=ScriptedModel([[function_call("delegate", {"question": "q"}, call_id="d1")], [assistant_message("ok")]]),
        tools=[delegate],
    )
    outcome = asyncio.run(run_guarded(outer, "go", budget=Budget(model_turns=4, tool_executions=10)))
    # 4 model turns in all: the outer one and three of the nested run; the fourth nested turn is refused
    assert outcome.used.models == 4 and len(looked) == 3
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_BUDGET)


def test_r2_outside_a_guarded_run_the_sdk_runs_as_usual() -> None:
    looked.clear()
    result = agents.Runner.run_sync(researcher(2), "q")
    assert result.final_output == "found it" and looked == ["lookup-0", "lookup-1"]


# --- a finished task keeps its answer; deadlines bound work in flight -------------------------------------------


def test_a_finished_task_keeps_its_final_output_on_every_replay(store: Store) -> None:
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("The answer is 42. api_key=sk-abc123abc123")]]))
    first = asyncio.run(run_guarded(agent, "q", budget=BUDGET, store=store, task_id="t-answer"))
    again = asyncio.run(run_guarded(agent, "q", budget=BUDGET, store=store, task_id="t-answer"))
    assert first.final_output == again.final_output
    assert str(again.final_output).startswith("The answer is 42.") and "sk-abc123" not in str(again.final_output)
    assert again.result is None and again.used == first.used  # nothing ran again


def test_a_write_still_running_at_the_deadline_stays_unknown_and_is_never_resent(store: Store) -> None:
    import time as clock

    started: list[str] = []

    @guarded_tool(
        kind="write",
        operation_id=lambda a: f"book-{a['order']}",
        verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
    )
    async def book(order: int) -> str:
        """Book a shipment (the carrier hangs)."""
        started.append(f"book-{order}")
        await asyncio.sleep(30)
        return "booked"

    agent = Agent(name="a", model=ScriptedModel([[function_call("book", {"order": 9}, call_id="b1")]]), tools=[book])
    budget = Budget(model_turns=3, tool_executions=3, deadline=clock.time() + 1.0)
    outcome = asyncio.run(run_guarded(agent, "book", budget=budget, store=store, task_id="t-deadline"))
    assert (outcome.status, outcome.reason, outcome.operation_id) == (
        Status.NEEDS_RECONCILIATION,
        Reason.DEADLINE,
        "book-9",
    )
    assert started == ["book-9"]
    (operation,) = store.operations("t-deadline")
    assert str(operation.state) == "unknown"


# --- budgets like the best: cost and tokens in the SDK adapter, per-tool limits (R2) ------------------------------


from agents import ModelSettings  # noqa: E402
from agents.models.openai_responses import OpenAIResponsesModel  # noqa: E402

from agents_loopguard.function_calling import GuardedTool, run_chat_completions  # noqa: E402
from agents_loopguard.values.pricing import Price  # noqa: E402
from tests.support.scripted_openai import ScriptedOpenAIServer, Usage, final_text, tool_call  # noqa: E402

PRICES = {"gpt-4o-mini": Price(input_per_million=1_000_000.0, output_per_million=1_000_000.0)}  # 1 per token


def http_agent(server: ScriptedOpenAIServer, *, max_tokens: int | None = 50, tools: list[Any] | None = None) -> Any:
    import openai

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    return Agent(
        name="clerk",
        model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client),
        model_settings=ModelSettings(max_tokens=max_tokens),
        tools=tools or [],
    )


def test_r2_the_sdk_adapter_charges_the_cost_budget_reserved_before_and_settled_with_the_usage(store: Store) -> None:
    with ScriptedOpenAIServer() as server:
        server.add(final_text("one", usage=Usage(30, 7)))
        outcome = asyncio.run(
            run_guarded(
                http_agent(server), "q", budget=Budget(5, 0, cost=10_000.0), prices=PRICES, store=store, task_id="c1"
            )
        )
        assert outcome.used.cost == 37.0  # settled with the reported usage (30 in, 7 out), 1 per token
        # a worst case over what is left refuses the next request before it leaves
        server.add(final_text("two"))
        tight = Budget(5, 0, cost=60.0)
        refused = asyncio.run(run_guarded(http_agent(server), "q" * 200, budget=tight, prices=PRICES, store=store))
        assert (refused.status, refused.reason) == (Status.STOPPED, Reason.COST_BUDGET)
        assert len(server.requests) == 1


def test_r2_token_limits_are_reserved_before_each_request_and_settled_with_the_usage(store: Store) -> None:
    with ScriptedOpenAIServer() as server:
        server.add(final_text("one", usage=Usage(30, 7)), final_text("two", usage=Usage(30, 7)))
        budget = Budget(5, 0, output_tokens=60)
        first = asyncio.run(run_guarded(http_agent(server), "q", budget=budget, store=store, task_id="tok"))
        assert (first.used.input_tokens, first.used.output_tokens) == (30, 7)
        # 7 used + a bound of 50 <= 60: the next request may go; 57 + 50 > 60: it may not
        store.recover("tok", who="t", why="again", now=1.0)
        second = asyncio.run(run_guarded(http_agent(server), "q", budget=budget, store=store, task_id="tok"))
        assert second.used.output_tokens == 14 and len(server.requests) == 2
        store.recover("tok", who="t", why="again", now=2.0)
        third = asyncio.run(run_guarded(http_agent(server), "q", budget=budget, store=store, task_id="tok"))
        assert (third.status, third.reason, len(server.requests)) == (Status.STOPPED, Reason.TOKEN_BUDGET, 2)


def test_r2_an_input_estimator_of_the_application_bounds_what_its_bytes_do_not(store: Store) -> None:
    """``estimate_input_tokens=``: a request carrying an image is reserved at the application's estimate; one that
    would cross the input limit is refused before it is sent."""
    seen: list[Any] = []

    def estimate(request: Any) -> int:
        seen.append(request)
        return 1_000 if "image" in str(request["input"]) else 10

    with ScriptedOpenAIServer() as server:
        server.add(final_text("small", usage=Usage(8, 2)))
        budget = Budget(5, 0, input_tokens=500)
        small = asyncio.run(
            run_guarded(
                http_agent(server), "q", budget=budget, store=store, task_id="est", estimate_input_tokens=estimate
            )
        )
        assert (small.status, small.used.input_tokens, len(server.requests)) == (Status.PARTIAL, 8, 1)
        assert seen[0]["input"] == [{"content": "q", "role": "user"}] and "tools" in seen[0]
        store.recover("est", who="t", why="a picture", now=1.0)
        picture = [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}]}]
        refused = asyncio.run(
            run_guarded(
                http_agent(server), picture, budget=budget, store=store, task_id="est", estimate_input_tokens=estimate
            )
        )
        assert (refused.status, refused.reason, len(server.requests)) == (Status.STOPPED, Reason.TOKEN_BUDGET, 1)


def test_r2_a_limit_the_run_cannot_enforce_is_refused_before_anything_runs() -> None:
    with ScriptedOpenAIServer() as server:
        with pytest.raises(ValueError, match="max_tokens"):
            asyncio.run(run_guarded(http_agent(server, max_tokens=None), "q", budget=Budget(5, 0, total_tokens=100)))
        with pytest.raises(ValueError, match="prices="):
            asyncio.run(run_guarded(http_agent(server), "q", budget=Budget(5, 0, cost=1.0)))
        with pytest.raises(ValueError, match="no entry for model"):
            asyncio.run(run_guarded(http_agent(server), "q", budget=Budget(5, 0, cost=1.0), prices={"o3": Price(1, 1)}))
        # an agent used as a tool is part of the run: its unbounded requests are refused before anything runs too
        inner = http_agent(server, max_tokens=None).clone(name="inner")
        outer = http_agent(server).clone(tools=[inner.as_tool(tool_name="ask", tool_description="Ask.")])
        with pytest.raises(ValueError, match=r"agent 'inner'.*max_tokens"):
            asyncio.run(run_guarded(outer, "q", budget=Budget(5, 5, total_tokens=100)))
        assert server.requests == []


def test_r2_the_raw_loop_reserves_and_settles_tokens_too() -> None:
    import openai

    with ScriptedOpenAIServer() as server:
        server.add(final_text("hi", usage=Usage(12, 3)))
        with openai.OpenAI(base_url=server.base_url, api_key="test") as client:
            outcome = run_chat_completions(
                client,
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "hi"}],
                tools=[],
                budget=Budget(3, 0, total_tokens=1_000),
                max_output_tokens=20,
                store=None,
            )
    assert (outcome.used.input_tokens, outcome.used.output_tokens) == (12, 3)


def test_r2_a_per_tool_limit_holds_for_the_whole_task_across_runs(store: Store) -> None:
    ran: list[int] = []

    @guarded_tool(max_executions=2, verify=lambda a, out: {"revision": int(a["n"]), "done": False, "effect": "none"})
    def search(n: int) -> str:
        """Search (expensive: two per task)."""
        ran.append(n)
        return f"hits {n}"

    def agent(*ns: int) -> Agent[Any]:
        turns = [[function_call("search", {"n": n}, call_id=f"s{n}")] for n in ns]
        return Agent(name="a", model=ScriptedModel([*turns, [assistant_message("ok")]]), tools=[search])

    first = asyncio.run(run_guarded(agent(1), "q", budget=Budget(10, 10), store=store, task_id="lim"))
    store.recover("lim", who="t", why="more work", now=1.0)
    second = asyncio.run(run_guarded(agent(2, 3), "q", budget=Budget(10, 10), store=store, task_id="lim"))
    assert ran == [1, 2]  # the third search of the task was refused before its body
    assert first.used.tools == 1 and (second.status, second.reason) == (Status.STOPPED, Reason.TOOL_LIMIT)


def test_r2_a_raw_tool_limit_is_enforced_like_the_sdks() -> None:
    import openai

    calls: list[int] = []
    tool = GuardedTool("search", lambda n: calls.append(n) or "hit", max_executions=1)
    with ScriptedOpenAIServer() as server:
        server.add(tool_call("search", {"n": 1}), tool_call("search", {"n": 2}), final_text("x"))
        with openai.OpenAI(base_url=server.base_url, api_key="test") as client:
            outcome = run_chat_completions(
                client, model="m", messages=[{"role": "user", "content": "q"}], tools=[tool], budget=Budget(5, 5)
            )
    assert calls == [1] and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.TOOL_LIMIT)
