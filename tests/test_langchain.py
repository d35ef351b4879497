"""The LangChain v1 middleware end to end: ``create_agent`` with ``LoopGuardMiddleware`` and ``ChatOpenAI`` talking
to the scripted OpenAI server over real HTTP (the real openai client), on real SQLite files and the real PostgreSQL
server; plus LangChain-side unit tests with the shipped scripted chat model. Each "Why" measurement of issue 19,
repeated under the middleware, ends bounded here."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRetryMiddleware, ToolCallLimitMiddleware
from langchain.tools import ToolRuntime
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import InjectedState

from agents_loopguard import Budget, Guard, MemoryStore, OperationState, Reason, Status
from agents_loopguard.langchain import LoopGuardMiddleware, outcome_of
from agents_loopguard.langchain.testing import ScriptedChatModel, calls
from agents_loopguard.run import RetryPolicy, declare_tool
from agents_loopguard.store import SQLStore
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, http_error, stall, tool_call
from tests.support.shop import MODEL
from tests.support.stores import sql_store
from tests.support.wire import choices_sent, tool_outputs

pytestmark = pytest.mark.timeout(90)
store = pytest.fixture(sql_store, name="store")
ran: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as srv:
        yield srv


@tool
def search(query: str) -> str:
    """Search the documents."""
    ran.append(f"search-{query}")
    return f"nothing about {query}"


@tool
def refund(order: int) -> str:
    """Refund an order."""
    ran.append(f"refund-{order}")
    return f"refunded {order}"


def no_progress(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": 0, "done": False, "effect": "none"}


refunds: dict[int, str] = {}


def refund_verified(args: dict[str, Any], output: Any) -> dict[str, Any]:
    state = refunds.get(args["order"])
    effect = "committed" if state == "done" else "unknown" if state == "lost" else "not_committed"
    return {"revision": 1, "done": effect == "committed", "effect": effect}


DECLARED = {
    "search": declare_tool("search", verify=no_progress),
    "refund": declare_tool(
        "refund", kind="write", operation_id=lambda a: f"refund-{a['order']}", verify=refund_verified
    ),
}


def chat(server: ScriptedOpenAIServer, **options: Any) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=server.base_url, api_key="test", **options)


def agent_with(model: Any, guard: LoopGuardMiddleware, *, tools: list[Any] | None = None, more: list[Any] = ()) -> Any:
    return create_agent(model, tools=tools if tools is not None else [search, refund], middleware=[*more, guard])


def ask(agent: Any, text: str = "go", **config: Any) -> Any:
    return agent.invoke({"messages": [{"role": "user", "content": text}]}, {"recursion_limit": 400, **config})


# --- the identical-call loop, over HTTP, on each SQL store ---------------------------------------------------------


def test_an_identical_call_loop_is_cut_at_its_third_proposal(server: ScriptedOpenAIServer, store: SQLStore) -> None:
    """R7 end to end: the model asks for the same search again and again; the third identical proposal is refused
    before it runs, the model is not asked again, and the task ends ``stopped/same_call`` in the SQL store."""
    server.add(*[tool_call("search", {"query": "refund policy"}) for _ in range(10)])
    guard = LoopGuardMiddleware(budget=Budget(model_turns=20, tool_executions=20), store=store, tools=DECLARED)
    result = ask(agent_with(chat(server), guard), thread_id="ticket-1", configurable={"thread_id": "ticket-1"})
    outcome = guard.outcome(result)
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    assert (len(server.requests), outcome.used.models, outcome.used.tools, len(ran)) == (3, 3, 2, 2)
    assert outcome.task_id == "ticket-1"  # the LangGraph thread is the task
    stored = store.task("ticket-1")
    assert stored is not None and stored.outcome is not None and stored.outcome["reason"] == "same_call"
    assert outcome_of(result) is not None and outcome_of(result).reason is Reason.SAME_CALL


def test_tool_call_limit_continue_mode_measured_unbounded_ends_bounded_under_the_guard(
    server: ScriptedOpenAIServer,
) -> None:
    """Issue 19's measurement: ``ToolCallLimitMiddleware(run_limit=3, exit_behavior="continue")`` stops running
    the tool but keeps asking the model. With the guard's ``on_refusal="continue"`` beside it, the model is told
    each refusal and the budget still ends the run: at most ``model_turns`` requests."""
    server.add(*[tool_call("search", {"query": f"q{i}"}) for i in range(60)])
    guard = LoopGuardMiddleware(
        budget=Budget(model_turns=8, tool_executions=20), store=MemoryStore(), tools=DECLARED, on_refusal="continue"
    )
    limit = ToolCallLimitMiddleware(run_limit=3, exit_behavior="continue")
    result = ask(agent_with(chat(server), guard, more=[limit]))
    outcome = guard.outcome(result)
    assert outcome is not None and outcome.status is Status.STOPPED
    assert outcome.reason in (Reason.MODEL_BUDGET, Reason.NO_PROGRESS)
    assert len(server.requests) == outcome.used.models <= 8 and len(ran) <= 3


# --- tool_choice (R12) ---------------------------------------------------------------------------------------------


def test_a_forced_tool_choice_is_released_on_the_exact_next_request(server: ScriptedOpenAIServer) -> None:
    """R12 over HTTP: ``tool_choice="required"`` is sent while work remains; the request after the tool budget
    ran out carries ``none`` (issue 19: ``create_agent`` drops a bound choice, and a forced one loops to a limit)."""
    server.add(tool_call("search", {"query": "a"}), tool_call("search", {"query": "b"}), final_text("done"))
    guard = LoopGuardMiddleware(
        budget=Budget(model_turns=6, tool_executions=2), store=MemoryStore(), tools=DECLARED, tool_choice="required"
    )
    outcome = guard.outcome(ask(agent_with(chat(server), guard)))
    assert choices_sent(server) == ["required", "required", "none"]
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)


# --- every attempt counted as the server saw it ---------------------------------------------------------------------


def test_the_clients_own_retries_are_taken_over_and_counted(server: ScriptedOpenAIServer) -> None:
    """Issue 19's measurement: ``ChatOpenAI``'s client retried inside one call (5 requests, 3 counted). Under the
    middleware each retry is a reserved attempt: the server's count is ``used.models``."""
    server.add(http_error(500, retry_after_ms=1), http_error(503, retry_after_ms=1), final_text("ok"))
    guard = LoopGuardMiddleware(budget=Budget(model_turns=10, tool_executions=2), store=MemoryStore(), tools=DECLARED)
    outcome = guard.outcome(ask(agent_with(chat(server), guard)))  # max_retries: the client's default (2)
    assert outcome is not None and outcome.reason is Reason.UNVERIFIED_FINAL
    assert len(server.requests) == outcome.used.models == 3


def test_model_retry_middleware_outside_and_client_retries_are_each_counted(server: ScriptedOpenAIServer) -> None:
    """Issue 19's measurement: with every request failing, ``ModelRetryMiddleware`` plus the client's retries sent 9
    requests counted as 1. Under the middleware, every request the server saw is a reserved model turn, and the
    run ends ``stopped/model_error`` within the budget."""
    server.add(*[http_error(500, retry_after_ms=1) for _ in range(12)])
    guard = LoopGuardMiddleware(budget=Budget(model_turns=10, tool_executions=2), store=MemoryStore(), tools=DECLARED)
    retry = ModelRetryMiddleware(max_retries=2, initial_delay=0.01, jitter=False)
    outcome = guard.outcome(ask(agent_with(chat(server), guard, more=[retry])))
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_ERROR)
    assert len(server.requests) == outcome.used.models == 3


def test_model_turns_end_the_retries_of_a_failing_server(server: ScriptedOpenAIServer) -> None:
    """R2: the budget caps the attempts, retries included: the attempt after the last turn is never sent."""
    server.add(*[http_error(500, retry_after_ms=1) for _ in range(12)])
    guard = LoopGuardMiddleware(budget=Budget(model_turns=2, tool_executions=2), store=MemoryStore(), tools=DECLARED)
    outcome = guard.outcome(ask(agent_with(chat(server, max_retries=5), guard)))
    assert outcome is not None and outcome.status is Status.STOPPED
    assert len(server.requests) == outcome.used.models == 2


def test_a_request_still_running_at_the_deadline_is_abandoned(server: ScriptedOpenAIServer) -> None:
    """R2: each attempt goes out with the time left before the deadline as its timeout."""
    import time

    server.add(stall(30, final_text("too late")))
    budget = Budget(model_turns=4, tool_executions=2, deadline=time.time() + 1.5)
    guard = LoopGuardMiddleware(budget=budget, store=MemoryStore(), tools=DECLARED)
    outcome = guard.outcome(ask(agent_with(chat(server, max_retries=0), guard)))
    assert outcome is not None and outcome.status is Status.STOPPED
    assert outcome.reason in (Reason.DEADLINE, Reason.MODEL_ERROR)


# --- a write never sent twice ---------------------------------------------------------------------------------------


def test_a_write_whose_answer_was_lost_is_never_sent_again(server: ScriptedOpenAIServer, store: SQLStore) -> None:
    """R10 over HTTP: the refund's body ran but its result is unknown (``verify`` says so); the task ends
    ``needs_reconciliation`` and a second run of the same thread never sends the write again."""
    refunds.clear()

    @tool("refund")
    def lost_refund(order: int) -> str:
        """Refund an order."""
        ran.append(f"refund-{order}")
        refunds[order] = "lost"
        raise ConnectionError("the payment service did not answer")

    server.add(tool_call("refund", {"order": 42}), tool_call("refund", {"order": 42}), final_text("x"))
    guard = LoopGuardMiddleware(budget=Budget(model_turns=6, tool_executions=4), store=store, tools=DECLARED)
    agent = agent_with(chat(server), guard, tools=[lost_refund])
    outcome = guard.outcome(ask(agent, configurable={"thread_id": "refund-42"}))
    assert outcome is not None and outcome.status is Status.NEEDS_RECONCILIATION
    again = guard.outcome(ask(agent, configurable={"thread_id": "refund-42"}))
    assert again is not None and again.status is Status.NEEDS_RECONCILIATION
    assert ran == ["refund-42"] and len(server.requests) == 1
    record = store.lookup_operation("refund-42")
    assert record is not None and record.state is OperationState.UNKNOWN


# --- the stop mark, the sticky end, async, and the fake chat model --------------------------------------------------


def test_the_stop_mark_is_honoured_before_the_next_call(server: ScriptedOpenAIServer, store: SQLStore) -> None:
    """R3: a stop requested while the tool ran is seen before the next model request."""

    @tool("search")
    def stopping_search(query: str) -> str:
        """Search the documents."""
        ran.append(query)
        store.request_stop("stopped-thread", "operator")
        return "found something"

    server.add(tool_call("search", {"query": "a"}), final_text("never asked"))
    guard = LoopGuardMiddleware(budget=Budget(model_turns=6, tool_executions=4), store=store, tools=DECLARED)
    agent = agent_with(chat(server), guard, tools=[stopping_search])
    outcome = guard.outcome(ask(agent, configurable={"thread_id": "stopped-thread"}))
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.STOP_REQUESTED)
    assert (len(server.requests), ran) == (1, ["a"])


def test_the_async_agent_is_guarded_the_same_way(server: ScriptedOpenAIServer) -> None:
    """``ainvoke``: the same cut at the third identical proposal."""
    server.add(*[tool_call("search", {"query": "x"}) for _ in range(6)])
    guard = LoopGuardMiddleware(budget=Budget(model_turns=20, tool_executions=20), store=MemoryStore(), tools=DECLARED)
    agent = agent_with(chat(server), guard)
    result = asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}))
    outcome = guard.outcome(result)
    assert outcome is not None and outcome.reason is Reason.SAME_CALL and len(server.requests) == 3


def test_five_outcomes_are_distinct_through_the_fake_chat_model() -> None:
    """The five statuses, each from its own scripted run through the shipped ``ScriptedChatModel``."""
    refunds.clear()

    def verify_done(args: dict[str, Any], output: Any) -> dict[str, Any]:
        return {"revision": 1, "done": True, "effect": "none"}

    @tool("refund")
    def failing_refund(order: int) -> str:
        """Refund an order."""
        refunds[order] = "lost"
        raise ConnectionError("no answer")

    def run(replies: list[Any], tools: list[Any], declared: dict[str, Any]) -> Status:
        guard = LoopGuardMiddleware(
            budget=Budget(model_turns=5, tool_executions=3), store=MemoryStore(), tools=declared
        )
        outcome = guard.outcome(ask(create_agent(ScriptedChatModel(replies), tools=tools, middleware=[guard])))
        assert outcome is not None
        return outcome.status

    @tool("search")
    def denied_search(query: str) -> str:
        """Search the documents."""
        raise PermissionError("the index refuses this key")

    statuses = {
        run(
            [calls(("search", {"query": "a"})), "done"],
            [search],
            {"search": declare_tool("search", verify=verify_done)},
        ),
        run(["an answer nobody validated"], [search], {}),
        run([calls(("search", {"query": "a"}))] * 4, [search], {}),
        run(
            [calls(("search", {"query": "a"})), "x"],
            [denied_search],
            {"search": declare_tool("search", retry=RetryPolicy())},
        ),
        run([calls(("refund", {"order": 7})), "x"], [failing_refund], DECLARED),
    }
    assert statuses == set(Status)


def test_a_thread_is_one_task_each_message_a_run_of_its_own_under_the_threads_budget() -> None:
    """Issue 26 item 5: messages 2 and 3 on a thread used to send nothing and return the user's own message. The
    thread is one task: a run that ended with an answer is reopened by the next message (a recorded ``message``
    transition, the counters going on), so the thread's budget bounds the whole conversation."""
    store = MemoryStore()
    model = ScriptedChatModel([calls(("search", {"query": "x"})), "Found x.", "It is from 2020.", "never sent"])
    guard = LoopGuardMiddleware(budget=Budget(model_turns=3, tool_executions=3), store=store, tools=DECLARED)
    agent = create_agent(model, tools=[search], middleware=[guard])
    seen = []
    for text in ("find x", "how old is it?", "thanks"):
        result = ask(agent, text, configurable={"thread_id": "t-chat"})
        outcome = guard.outcome(result)
        assert outcome is not None and outcome.task_id == "t-chat"
        seen.append((outcome.status, outcome.reason, outcome.used.models, result["messages"][-1].content))
    assert seen[:2] == [
        (Status.PARTIAL, Reason.UNVERIFIED_FINAL, 2, "Found x."),
        (Status.PARTIAL, Reason.UNVERIFIED_FINAL, 3, "It is from 2020."),
    ]
    assert seen[2][:3] == (Status.STOPPED, Reason.MODEL_BUDGET, 3)  # the thread's budget holds, and it says so
    assert seen[2][3].startswith("Stopped by loopguard (stopped/model_budget)")
    assert len(model.requests) == 3 and ran == ["search-x"]
    assert [t.task_id for t in store.tasks()] == ["t-chat"]
    assert [t.kind for t in store.transitions("t-chat")] == ["message", "message"]


def test_without_conversation_a_thread_answers_every_later_message_with_its_outcome() -> None:
    """``conversation=False`` (as ADK's plugin): the thread's task is not reopened; the next message sends nothing,
    is answered with the task's outcome, and nothing is recorded."""
    store = MemoryStore()
    model = ScriptedChatModel(["Hello.", "never sent"])
    guard = LoopGuardMiddleware(budget=Budget(model_turns=5, tool_executions=2), store=store, conversation=False)
    agent = create_agent(model, tools=[], middleware=[guard])
    ask(agent, configurable={"thread_id": "t-once"})
    again = ask(agent, "again", configurable={"thread_id": "t-once"})
    outcome = guard.outcome(again)
    assert outcome is not None and (outcome.reason, outcome.used.models) == (Reason.UNVERIFIED_FINAL, 1)
    assert len(model.requests) == 1 and store.transitions("t-once") == []
    assert again["messages"][-1].content.startswith("Stopped by loopguard (partial/unverified_final)")


def test_a_guard_object_given_is_never_reopened_nor_left_running() -> None:
    """``guard=`` (a ``Guard`` object, its outcome sticky in memory): a second message on its task is answered with
    that outcome; the stored task is not reopened behind it (it would be left running with nothing running it)."""
    store = MemoryStore()
    model = ScriptedChatModel(["Hello.", "never sent"])
    given = Guard(budget=Budget(model_turns=5, tool_executions=2), store=store, task_id="t-guard")
    agent = create_agent(model, tools=[], middleware=[LoopGuardMiddleware(guard=given)])
    ask(agent, configurable={"thread_id": "t-guard"})
    ask(agent, "again", configurable={"thread_id": "t-guard"})
    stored = store.task("t-guard")
    assert stored is not None and stored.outcome is not None and store.transitions("t-guard") == []
    assert len(model.requests) == 1


def test_a_task_the_guard_ended_stays_ended_until_an_operator_recovers_it() -> None:
    """R11: a thread's task the guard stopped (here ``same_call``) is sticky: the next message runs nothing and is
    answered with the stop; ``loopguard recover`` (an operator's recorded decision) lets the thread go on, its
    counters never reset."""
    from agents_loopguard.ops.operator import recover_task

    store = MemoryStore()
    model = ScriptedChatModel([calls(("search", {"query": "x"}))] * 3 + ["Here is what I found."])
    guard = LoopGuardMiddleware(budget=Budget(model_turns=10, tool_executions=10), store=store, tools=DECLARED)
    agent = create_agent(model, tools=[search], middleware=[guard])
    first = ask(agent, configurable={"thread_id": "t-sticky"})
    assert first["messages"][-1].content.startswith("Stopped by loopguard (stopped/same_call)")  # it says why
    held = ask(agent, "what did you find?", configurable={"thread_id": "t-sticky"})
    assert held["messages"][-1].content.startswith("Stopped by loopguard (stopped/same_call)")
    assert len(model.requests) == 3 and store.transitions("t-sticky") == []
    recover_task(store, "t-sticky", who="lead", why="the search is fixed")
    again = guard.outcome(ask(agent, "what did you find?", configurable={"thread_id": "t-sticky"}))
    assert again is not None and (again.task_id, again.reason) == ("t-sticky", Reason.UNVERIFIED_FINAL)
    assert again.final_output == "Here is what I found." and len(model.requests) == 4 and again.used.models == 4


def test_a_thread_an_operator_stopped_holds_and_says_why() -> None:
    """R3: a stop mark set on the thread's task after its run ended holds the thread: the next message sends
    nothing and is answered with the stop."""
    store = MemoryStore()
    model = ScriptedChatModel(["Hello.", "never sent"])
    guard = LoopGuardMiddleware(budget=Budget(model_turns=5, tool_executions=2), store=store)
    agent = create_agent(model, tools=[], middleware=[guard])
    ask(agent, configurable={"thread_id": "t-held"})
    store.request_stop("t-held", "operator")
    held = ask(agent, "again", configurable={"thread_id": "t-held"})
    assert len(model.requests) == 1
    assert held["messages"][-1].content.startswith("Stopped by loopguard (stopped/stop_requested)")
    assert [t.task_id for t in store.tasks()] == ["t-held"]


def test_a_middleware_that_replaces_the_model_after_the_guard_is_refused_naming_the_fix(
    server: ScriptedOpenAIServer,
) -> None:
    """A model router listed after the guard swaps the guarded model for one of its own: its request cannot be
    reserved, so the run ends ``stopped/fatal`` (fail closed) naming the fix, and nothing more is sent."""
    from langchain.agents.middleware import AgentMiddleware

    other = chat(server)

    class Router(AgentMiddleware[Any, Any, Any]):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            return handler(request.override(model=other))

    server.add(tool_call("search", {"query": "a"}), final_text("never"))
    guard = LoopGuardMiddleware(budget=Budget(model_turns=6, tool_executions=4), store=MemoryStore(), tools=DECLARED)
    result = ask(create_agent(chat(server), tools=[search], middleware=[guard, Router()]))
    outcome = guard.outcome(result)
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.FATAL)
    assert "list it before the guard" in outcome.detail and ran == [] and len(server.requests) == 1


def test_a_tool_calls_limit_per_tool_is_a_declaration(server: ScriptedOpenAIServer) -> None:
    """``ToolCallLimitMiddleware(tool_name=..., run_limit=2)`` becomes ``declare_tool(..., max_executions=2)``: the
    third execution of that tool is refused before it runs."""
    server.add(*[tool_call("search", {"query": f"q{i}"}) for i in range(5)])
    declared = {"search": declare_tool("search", max_executions=2)}
    guard = LoopGuardMiddleware(budget=Budget(model_turns=10, tool_executions=10), store=MemoryStore(), tools=declared)
    outcome = guard.outcome(ask(agent_with(chat(server), guard)))
    assert outcome is not None and outcome.reason is Reason.TOOL_LIMIT
    assert len(ran) == 2 and len(server.requests) == 3
    assert "nothing about q1" in tool_outputs("chat", server.requests[-1].body).values()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_langchain_example_runs_as_documented() -> None:
    """``python examples/langchain_refund_approval.py`` with no API key, against the scripted server."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "langchain_refund_approval.py")],
        capture_output=True,
        text=True,
        timeout=110,
        cwd="/",
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "search loop: stopped/same_call after 3 model turns" in done.stdout
    assert "resumed: completed/validated_done, models 2, tools 1" in done.stdout
    assert "refunds: {42: 'refunded'}" in done.stdout


def test_a_sync_agent_on_a_sql_store_outlives_the_threads_of_its_tool_calls(store: SQLStore) -> None:
    """LangGraph's sync tool node runs each response's calls on threads of its own: each thread's store connection
    goes back to the pool when the thread ends (the pool holds 15: the 20th call used to wait 30 s and fail)."""

    def progress(args: dict[str, Any], output: Any) -> dict[str, Any]:
        return {"revision": int(args["query"]), "done": False, "effect": "none"}

    replies = [calls(("search", {"query": str(n)}), start=n) for n in range(1, 21)] + ["searched"]
    guard = LoopGuardMiddleware(
        budget=Budget(model_turns=25, tool_executions=25),
        store=store,
        tools={"search": declare_tool("search", verify=progress)},
    )
    outcome = guard.outcome(ask(create_agent(ScriptedChatModel(replies), tools=[search], middleware=[guard])))
    assert outcome is not None and (outcome.reason, outcome.used.tools, len(ran)) == (Reason.UNVERIFIED_FINAL, 20, 20)


def test_exit_behavior_error_raises_guard_stopped_with_the_stored_outcome() -> None:
    """``on_refusal="error"`` (LangChain's ``exit_behavior`` name) is ``"raise"``: ``invoke`` raises
    ``GuardStopped`` carrying the stored outcome."""
    from agents_loopguard import GuardStopped

    store = MemoryStore()
    guard = LoopGuardMiddleware(
        budget=Budget(model_turns=10, tool_executions=10), store=store, tools=DECLARED, on_refusal="error"
    )
    agent = create_agent(ScriptedChatModel([calls(("search", {"query": "x"}))] * 4), tools=[search], middleware=[guard])
    with pytest.raises(GuardStopped) as raised:
        ask(agent, configurable={"thread_id": "t-error"})
    assert raised.value.outcome.reason is Reason.SAME_CALL and len(ran) == 2
    stored = store.task("t-error")
    assert stored is not None and stored.outcome is not None and stored.outcome["reason"] == "same_call"


def test_a_tool_retry_layer_after_the_guard_retries_a_read_each_run_reserved_until_same_call(
    server: ScriptedOpenAIServer,
) -> None:
    """Issue 26 item 2, for a read: each run of the body by a ``ToolRetryMiddleware`` listed after the guard is a
    proposal of its own, reserved; the third identical run at one revision is refused ``same_call`` before its body,
    so a layer retrying a failing read is bounded by the guard's loop rule, not by its own count."""
    from langchain.agents.middleware import ToolRetryMiddleware

    @tool("search")
    def failing_search(query: str) -> str:
        """Search the documents."""
        ran.append(query)
        raise ConnectionError("the index did not answer")

    server.add(tool_call("search", {"query": "a"}), final_text("never"))
    retry = ToolRetryMiddleware(max_retries=5, initial_delay=0, jitter=False)
    guard = LoopGuardMiddleware(budget=Budget(model_turns=6, tool_executions=10), store=MemoryStore(), tools=DECLARED)
    outcome = guard.outcome(ask(create_agent(chat(server), tools=[failing_search], middleware=[guard, retry])))
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    assert ran == ["a", "a"] and outcome.used.tools == 2 and len(server.requests) == 1


def test_arguments_langgraph_injects_at_the_body_are_not_the_calls_arguments() -> None:
    """The guard proposes a call at its body, where LangGraph has injected the state or a ``ToolRuntime``: those
    are not the model's arguments, and neither the fingerprint nor the trace carries them."""

    @tool("search")
    def runtime_search(query: str, runtime: ToolRuntime) -> str:
        """Search the documents."""
        ran.append(type(runtime).__name__)
        return "found"

    @tool("refund")
    def state_refund(order: int, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Refund an order."""
        ran.append(f"refund-{order}-{len(state['messages'])}")
        refunds[order] = "done"
        return "refunded"

    refunds.clear()
    store = MemoryStore()
    guard = LoopGuardMiddleware(budget=Budget(model_turns=4, tool_executions=4), store=store, tools=DECLARED)
    model = ScriptedChatModel([calls(("search", {"query": "q"}), ("refund", {"order": 3})), "done"])
    outcome = guard.outcome(ask(create_agent(model, tools=[runtime_search, state_refund], middleware=[guard])))
    assert outcome is not None and ran == ["ToolRuntime", "refund-3-2"]
    assert [e.args for e in store.trace(outcome.task_id) if e.kind == "tool"] == [{"query": "q"}, {"order": 3}]
    record = store.lookup_operation("refund-3")
    assert record is not None and record.state is OperationState.COMMITTED
