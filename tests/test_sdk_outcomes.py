"""Every way an Agents SDK run can end maps to one distinct Outcome (ScriptedModel, non-streamed and streamed)."""

from __future__ import annotations

import asyncio
from typing import Any

import agents
import httpx2
import openai
import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrail,
    OutputGuardrail,
    RunState,
    ToolGuardrailFunctionOutput,
    tool_input_guardrail,
)
from agents.exceptions import ModelBehaviorError, UserError
from agents.testing import ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, Guard, MemoryStore, OperationState, Reason, Status
from agents_loopguard.sdk import GuardStopped, guarded_tool, run_guarded, run_guarded_streamed, run_guarded_sync
from agents_loopguard.values.outcome import NextAction
from tests.support.sdk import guarded_outcome, told

pytestmark = pytest.mark.timeout(30)
agents.set_tracing_disabled(True)

BUDGET = Budget(model_turns=10, tool_executions=10)
sent: list[str] = []


def progress(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": int(args["page"]), "done": False, "effect": "none"}


@guarded_tool(verify=progress)
def read_page(page: int) -> str:
    """Read one page."""
    return f"page {page}"


@guarded_tool
def lookup(q: str) -> str:
    """Look something up (the application verifies no progress from it)."""
    return f"nothing about {q}"


@guarded_tool(verify=lambda a, out: {"revision": 9, "done": True, "effect": "none"})
def finish(summary: str) -> str:
    """Finish the task."""
    return f"final: {summary}"


def pay_verify(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": 1, "done": False, "effect": "committed"}


@guarded_tool(kind="write", operation_id=lambda a: f"pay-{a['order']}", verify=pay_verify)
def pay(order: int) -> str:
    """Pay an order."""
    sent.append(f"pay-{order}")
    return "paid"


@guarded_tool(kind="write", operation_id=lambda a: f"ship-{a['order']}", verify=pay_verify)
def ship(order: int) -> str:
    """Ship an order: the carrier accepts it, then the answer is lost."""
    sent.append(f"ship-{order}")
    raise TimeoutError("carrier did not answer")


def step(name: str, args: dict[str, Any], cid: str) -> list[Any]:
    return [function_call(name, args, call_id=cid)]


def agent_for(*turns: list[Any], final: str | None = "answer", **kwargs: Any) -> Agent[Any]:
    script: list[Any] = [*turns] + ([[assistant_message(final)]] if final is not None else [])
    kwargs.setdefault("tools", [read_page, lookup, finish, pay, ship])
    return Agent(name="a", model=ScriptedModel(script), **kwargs)


async def streamed(agent: Agent[Any], **kwargs: Any) -> Any:
    return await guarded_outcome(agent, "go", stream=True, **kwargs)


def both_modes(agent_factory: Any, **kwargs: Any) -> list[Any]:
    """Run the same scenario non-streamed and streamed, each on a store of its own (a task id may repeat);
    return both outcomes."""
    kwargs.setdefault("budget", BUDGET)
    fresh = "store" not in kwargs and "guard" not in kwargs
    first = asyncio.run(run_guarded(agent_factory(), "go", **({"store": MemoryStore()} if fresh else {}), **kwargs))
    second = asyncio.run(streamed(agent_factory(), **({"store": MemoryStore()} if fresh else {}), **kwargs))
    return [first, second]


@pytest.fixture(autouse=True)
def _clear() -> None:
    sent.clear()


# --- final outputs ------------------------------------------------------------------------------------


def test_validated_done_from_a_tool_is_completed_with_the_verified_value() -> None:
    for outcome in both_modes(lambda: agent_for(step("finish", {"summary": "s"}, "c1"))):
        assert (outcome.status, outcome.reason, outcome.value, outcome.revision) == (
            Status.COMPLETED,
            Reason.VALIDATED_DONE,
            "final: s",
            9,
        )
        assert outcome.result.final_output == "answer"
        assert outcome.record().allowed_next_actions == [str(NextAction.RETURN_RESULT)]


def test_a_final_answer_nobody_validated_is_partial_with_the_last_verified_value() -> None:
    """Rules: R6 (progress is decided by the application), R11 (outcomes)."""
    scenario = lambda: agent_for(step("read_page", {"page": 1}, "c1"), step("read_page", {"page": 2}, "c2"))  # noqa: E731
    for outcome in both_modes(scenario):
        assert (outcome.status, outcome.reason, outcome.value, outcome.revision) == (
            Status.PARTIAL,
            Reason.UNVERIFIED_FINAL,
            "page 2",
            2,
        )
        assert outcome.result.final_output == "answer"


def test_verify_output_lets_a_final_answer_complete_the_task() -> None:
    """Rules: R6 (progress is decided by the application), R11 (outcomes)."""
    outcome = asyncio.run(
        run_guarded(agent_for(final="42"), "go", budget=BUDGET, verify_output=lambda out: out == "42")
    )
    assert (outcome.status, outcome.value) == (Status.COMPLETED, "42")

    async def evidence(out: Any) -> dict[str, Any]:
        return {"revision": 0, "done": False, "effect": "none"}

    outcome = asyncio.run(run_guarded(agent_for(final="41"), "go", budget=BUDGET, verify_output=evidence))
    assert (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)
    outcome = asyncio.run(run_guarded(agent_for(), "go", budget=BUDGET, verify_output=lambda out: {"done": 1}))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.INVALID_EVIDENCE)


# --- limits -----------------------------------------------------------------------------------------------


def test_max_turns_is_stopped_max_turns_not_an_exception() -> None:
    """Rules: R11 (outcomes)."""
    scenario = lambda: agent_for(*[step("read_page", {"page": i}, f"c{i}") for i in range(1, 6)])  # noqa: E731
    for outcome in both_modes(scenario, max_turns=2):
        assert (outcome.status, outcome.reason, outcome.value) == (Status.STOPPED, Reason.MAX_TURNS, "page 2")
        assert outcome.result is not None and len(outcome.result.new_items) > 0  # the SDK's run data stays reachable


def test_a_max_turns_error_handler_does_not_turn_the_limit_into_success() -> None:
    agent = agent_for(*[step("read_page", {"page": i}, f"c{i}") for i in range(1, 6)])
    outcome = asyncio.run(
        run_guarded(agent, "go", budget=BUDGET, max_turns=2, error_handlers={"max_turns": lambda data: "gave up"})
    )
    assert (outcome.status, outcome.reason, outcome.result.final_output) == (
        Status.STOPPED,
        Reason.MAX_TURNS,
        "gave up",
    )


def test_model_budget_counts_attempts_and_ends_the_run_before_the_next_call() -> None:
    scenario = lambda: agent_for(*[step("read_page", {"page": i}, f"c{i}") for i in range(1, 6)])  # noqa: E731
    for outcome in both_modes(scenario, budget=Budget(model_turns=3, tool_executions=10)):
        assert (outcome.status, outcome.reason, outcome.used.models, outcome.used.tools) == (
            Status.STOPPED,
            Reason.MODEL_BUDGET,
            3,
            3,
        )


def test_tool_budget_refusal_ends_the_run() -> None:
    scenario = lambda: agent_for(*[step("read_page", {"page": i}, f"c{i}") for i in range(1, 6)])  # noqa: E731
    for outcome in both_modes(scenario, budget=Budget(model_turns=10, tool_executions=2)):
        assert (outcome.status, outcome.reason, outcome.used.tools, outcome.value) == (
            Status.STOPPED,
            Reason.TOOL_BUDGET,
            2,
            "page 2",
        )


# --- refusal modes ----------------------------------------------------------------------------------------


def looping_agent() -> Agent[Any]:
    return agent_for(*[step("lookup", {"q": "x"}, f"c{i}") for i in range(6)], final="I give up")


def test_refusal_end_mode_ends_with_the_refusal() -> None:
    for outcome in both_modes(looping_agent):
        assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.STOPPED, Reason.SAME_CALL, 2)


def test_refusal_continue_mode_tells_the_model_and_the_same_call_stays_refused() -> None:
    agent = looping_agent()
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET, on_refusal="continue"))
    assert (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)
    assert outcome.used.tools == 2 and outcome.used.models == 7  # four refusals told: none ran, none was counted
    assert "same_call" in outcome.detail and outcome.result.final_output == "I give up"
    model = agent.model
    assert isinstance(model, ScriptedModel)
    outputs = told(model.calls[-1].input)
    assert outputs[:2] == ["nothing about x"] * 2 and all("same_call" in o for o in outputs[2:])


def test_refusal_continue_mode_still_holds_the_task_budget() -> None:
    agent = agent_for(*[step("read_page", {"page": i}, f"c{i}") for i in range(1, 9)], final="done")
    outcome = asyncio.run(
        run_guarded(agent, "go", budget=Budget(model_turns=6, tool_executions=3), on_refusal="continue")
    )
    assert (outcome.status, outcome.reason, outcome.used.tools, outcome.used.models) == (
        Status.STOPPED,
        Reason.MODEL_BUDGET,
        3,
        6,
    )


def test_refusal_raise_mode_raises_with_the_stored_outcome() -> None:
    store = MemoryStore()
    with pytest.raises(GuardStopped) as caught:
        asyncio.run(run_guarded(looping_agent(), "go", budget=BUDGET, on_refusal="raise", store=store, task_id="r"))
    assert (caught.value.outcome.status, caught.value.outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    assert store.task("r").outcome["reason"] == "same_call"  # type: ignore[index,union-attr]


def test_a_finished_task_returns_its_outcome_and_runs_nothing() -> None:
    """Rules: R11 (outcomes)."""
    store = MemoryStore()
    first = asyncio.run(run_guarded(looping_agent(), "go", budget=BUDGET, store=store, task_id="t"))
    agent = looping_agent()
    again = asyncio.run(run_guarded(agent, "go", budget=BUDGET, store=store, task_id="t"))
    assert (again.status, again.reason, again.used) == (first.status, first.reason, first.used)
    assert agent.model.calls == ()  # type: ignore[attr-defined]
    guard = Guard(budget=BUDGET, store=store, task_id="t")
    assert asyncio.run(run_guarded(looping_agent(), "go", guard=guard)) is guard.outcome


# --- faults -----------------------------------------------------------------------------------------------


@guarded_tool(timeout=0.05, timeout_behavior="raise_exception")
async def slow_read(q: str) -> str:
    """A read that hangs."""
    await asyncio.sleep(10)
    return "late"


@guarded_tool(timeout=0.05)
async def slow_soft(q: str) -> str:
    """A read that hangs; the SDK tells the model it timed out."""
    await asyncio.sleep(10)
    return "late"


@guarded_tool(
    kind="write",
    operation_id=lambda a: f"slow-{a['order']}",
    verify=pay_verify,
    timeout=0.05,
)
async def slow_write(order: int) -> str:
    """A write whose answer never comes back in time."""
    sent.append(f"slow-{order}")
    await asyncio.sleep(10)
    return "late"


def test_tool_timeout_error_is_tool_timeout() -> None:
    scenario = lambda: agent_for(step("slow_read", {"q": "x"}, "c1"), tools=[slow_read])  # noqa: E731
    for outcome in both_modes(scenario):
        assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.STOPPED, Reason.TOOL_TIMEOUT, 1)
        assert NextAction.BOUNDED_RETRY.value in outcome.record().allowed_next_actions


def test_a_timeout_the_sdk_reports_to_the_model_still_reaches_the_guard() -> None:
    agent = agent_for(step("slow_soft", {"q": "x"}, "c1"), tools=[slow_soft])
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.TOOL_TIMEOUT)
    agent = agent_for(step("slow_soft", {"q": "x"}, "c1"), tools=[slow_soft])
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET, on_refusal="continue"))
    assert (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)


def test_a_write_that_timed_out_needs_reconciliation_and_is_not_sent_again() -> None:
    store = MemoryStore()
    agent = agent_for(
        step("slow_write", {"order": 7}, "c1"), step("slow_write", {"order": 7}, "c2"), tools=[slow_write]
    )
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET, store=store, on_refusal="continue"))
    assert (outcome.status, outcome.reason, outcome.operation_id) == (
        Status.NEEDS_RECONCILIATION,
        Reason.TOOL_TIMEOUT,
        "slow-7",
    )
    assert sent == ["slow-7"] and store.lookup_operation("slow-7").state is OperationState.UNKNOWN  # type: ignore[union-attr]
    assert outcome.record().allowed_next_actions == ["query_operation_status", "human_review"]


def test_a_write_that_raised_after_its_effect_is_unknown_and_blocks_a_resend() -> None:
    """Rules: R10 (writes and the ledger)."""
    store = MemoryStore()
    first = asyncio.run(
        run_guarded(agent_for(step("ship", {"order": 3}, "c1")), "go", budget=BUDGET, store=store, task_id="t1")
    )
    assert (first.status, first.reason, first.operation_id) == (
        Status.NEEDS_RECONCILIATION,
        Reason.EXECUTOR_EXCEPTION,
        "ship-3",
    )
    second = asyncio.run(
        run_guarded(agent_for(step("ship", {"order": 3}, "c1")), "go", budget=BUDGET, store=store, task_id="t2")
    )
    assert (second.status, second.reason, second.used.tools) == (Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT, 0)
    assert sent == ["ship-3"]


def test_an_unknown_effect_from_verify_is_needs_reconciliation() -> None:
    @guarded_tool(
        kind="write",
        operation_id=lambda a: f"note-{a['n']}",
        verify=lambda a, out: {"revision": 0, "done": False, "effect": "unknown"},
    )
    def note(n: int) -> str:
        """Write a note."""
        return "ok?"

    outcome = asyncio.run(run_guarded(agent_for(step("note", {"n": 1}, "c1"), tools=[note]), "go", budget=BUDGET))
    assert (outcome.status, outcome.reason, outcome.operation_id) == (
        Status.NEEDS_RECONCILIATION,
        Reason.UNKNOWN_COMMIT,
        "note-1",
    )


def test_guardrail_tripwires_are_guardrail() -> None:
    def trip(*_args: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info="no", tripwire_triggered=True)

    @tool_input_guardrail
    def block(_data: Any) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.raise_exception(output_info="blocked")

    @guarded_tool(tool_input_guardrails=[block])
    def risky(q: str) -> str:
        """Risky."""
        raise AssertionError("must not run")

    cases = [
        lambda: agent_for(input_guardrails=[InputGuardrail(guardrail_function=trip, run_in_parallel=False)]),
        lambda: agent_for(output_guardrails=[OutputGuardrail(guardrail_function=trip)]),
        lambda: agent_for(step("risky", {"q": "x"}, "c1"), tools=[risky]),
    ]
    for case in cases:
        for outcome in both_modes(case):
            assert (outcome.status, outcome.reason, outcome.used.tools) == (Status.STOPPED, Reason.GUARDRAIL, 0)


def test_model_behavior_errors_are_model_behavior() -> None:
    scenario = lambda: agent_for(step("no_such_tool", {}, "c1"))  # noqa: E731
    for outcome in both_modes(scenario):
        assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_BEHAVIOR)


def test_model_api_errors_after_retries_are_model_error() -> None:
    error = openai.APIConnectionError(request=httpx2.Request("POST", "https://example.invalid/v1"))
    outcome = asyncio.run(run_guarded(Agent(name="a", model=ScriptedModel([error])), "go", budget=BUDGET))
    assert (outcome.status, outcome.reason, outcome.used.models) == (Status.STOPPED, Reason.MODEL_ERROR, 1)


def test_a_programming_error_ends_the_task_as_fatal_and_is_raised() -> None:
    store = MemoryStore()

    @guarded_tool(failure_error_function=None)
    def broken(q: str) -> str:
        """Broken."""
        raise KeyError("bug")

    agent = agent_for(step("broken", {"q": "x"}, "c1"), tools=[broken])
    # the guard recorded the failure (executor_exception) before the SDK re-raised it: that is the outcome
    outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET, store=store))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.EXECUTOR_EXCEPTION)

    class Boom(agents.RunHooks[Any]):
        async def on_agent_start(self, context: Any, agent: Any) -> None:
            raise UserError("misconfigured")

    with pytest.raises(UserError, match="misconfigured"):
        asyncio.run(run_guarded(agent_for(), "go", budget=BUDGET, store=store, task_id="f", hooks=Boom()))
    assert store.task("f").outcome["reason"] == "fatal"  # type: ignore[index,union-attr]


# --- cancellation -----------------------------------------------------------------------------------------


def test_cancelling_the_run_task_is_stopped_cancelled_with_the_calls_in_flight() -> None:
    """Rules: R3 (shared stop mark)."""
    started: list[asyncio.Event] = []

    @guarded_tool
    async def crawl(url: str) -> str:
        """Crawl."""
        started[-1].set()
        await asyncio.sleep(10)
        return "never"

    @guarded_tool(kind="write", operation_id=lambda a: f"mail-{a['to']}", verify=pay_verify)
    async def mail(to: str) -> str:
        """Send mail."""
        await asyncio.sleep(10)
        return "never"

    async def scenario(tools: list[Any], turn: list[Any]) -> Any:
        started.append(asyncio.Event())
        agent = Agent(name="a", model=ScriptedModel([turn, [assistant_message("x")]]), tools=tools)
        task = asyncio.create_task(run_guarded(agent, "go", budget=BUDGET, task_id="c", store=MemoryStore()))
        await started[-1].wait()
        await asyncio.sleep(0.01)
        task.cancel()
        return await task

    read_only = asyncio.run(scenario([crawl], [function_call("crawl", {"url": "u"}, call_id="k1")]))
    assert (read_only.status, read_only.reason, read_only.in_flight) == (
        Status.STOPPED,
        Reason.CANCELLED,
        ("crawl[k1]",),
    )
    turn = [function_call("crawl", {"url": "u"}, call_id="k1"), function_call("mail", {"to": "bo"}, call_id="k2")]
    with_write = asyncio.run(scenario([crawl, mail], turn))
    assert (with_write.status, with_write.reason, with_write.operation_id) == (
        Status.NEEDS_RECONCILIATION,
        Reason.CANCELLED,
        "mail-bo",
    )
    assert sorted(with_write.in_flight) == ["crawl[k1]", "mail[k2] operation mail-bo"]


def test_cancelling_a_stream_is_stopped_cancelled_with_the_calls_in_flight() -> None:
    async def scenario(mode: Any) -> Any:
        started = asyncio.Event()

        @guarded_tool
        async def crawl(url: str) -> str:
            """Crawl."""
            started.set()
            await asyncio.sleep(10)
            return "never"

        agent = agent_for(step("crawl", {"url": "u"}, "k1"), tools=[crawl])
        stream = run_guarded_streamed(agent, "go", budget=BUDGET)
        async for event in stream.stream_events():
            if getattr(event, "name", None) == "tool_called":
                await asyncio.wait_for(started.wait(), 5)  # the body is running (a sleep raced a loaded machine)
                stream.cancel(mode)
        return await stream.outcome()

    immediate = asyncio.run(scenario("immediate"))
    assert (immediate.status, immediate.reason, immediate.in_flight) == (
        Status.STOPPED,
        Reason.CANCELLED,
        ("crawl[k1]",),
    )


def test_cancelling_a_stream_after_the_turn_lets_the_turn_finish() -> None:
    async def scenario() -> Any:
        agent = agent_for(step("read_page", {"page": 1}, "k1"), step("read_page", {"page": 2}, "k2"))
        stream = run_guarded_streamed(agent, "go", budget=BUDGET)
        async for event in stream.stream_events():
            if getattr(event, "name", None) == "tool_called":
                stream.cancel("after_turn")
        return await stream.outcome()

    outcome = asyncio.run(scenario())
    assert (outcome.status, outcome.reason, outcome.in_flight, outcome.used.tools) == (
        Status.STOPPED,
        Reason.CANCELLED,
        (),
        1,
    )
    assert outcome.value == "page 1"


# --- approvals --------------------------------------------------------------------------------------------


@guarded_tool(kind="write", operation_id=lambda a: f"refund-{a['order']}", verify=pay_verify, needs_approval=True)
def refund(order: int) -> str:
    """Refund an order (needs a human)."""
    sent.append(f"refund-{order}")
    return "refunded"


def test_an_approval_interruption_is_needs_human_with_the_state_reachable() -> None:
    """Rules: R13 (approval pauses)."""
    paused: list[tuple[Any, str]] = []

    def on_pause(result: Any, guard: Guard) -> str:
        paused.append((result.to_state().to_json(), guard.task_id))
        return "pause-1"

    scenario = lambda: agent_for(step("refund", {"order": 5}, "c1"), tools=[refund])  # noqa: E731
    for outcome in both_modes(scenario, on_pause=on_pause, task_id="ap"):
        assert (outcome.status, outcome.reason, outcome.pause_id) == (Status.NEEDS_HUMAN, Reason.APPROVAL, "pause-1")
        assert outcome.used.tools == 0 and sent == []
        assert [item.name for item in outcome.result.interruptions] == ["refund"]
        assert outcome.record().allowed_next_actions == ["human_review"]
    assert len(paused) == 2 and paused[0][1] == "ap"


def test_an_approved_call_runs_once_on_resume_and_the_counters_continue() -> None:
    store = MemoryStore()

    async def scenario() -> tuple[Any, Any]:
        agent = agent_for(step("refund", {"order": 5}, "c1"), tools=[refund], final="refunded it")
        paused = await run_guarded(agent, "go", budget=BUDGET, store=store, task_id="res")
        state = await RunState.from_json(agent, paused.result.to_state().to_json())
        state.approve(state.get_interruptions()[0])
        store.recover("res", who="op", why="approved the refund", kind="resume")
        resumed = await run_guarded(agent, state, budget=BUDGET, store=store, task_id="res")
        return paused, resumed

    paused, resumed = asyncio.run(scenario())
    assert (paused.status, resumed.status, resumed.reason) == (
        Status.NEEDS_HUMAN,
        Status.PARTIAL,
        Reason.UNVERIFIED_FINAL,
    )
    assert sent == ["refund-5"] and resumed.used.tools == 1 and resumed.used.models == 2


# --- sync entry point --------------------------------------------------------------------------------------


def test_run_guarded_sync_returns_the_same_outcome() -> None:
    outcome = run_guarded_sync(agent_for(step("finish", {"summary": "s"}, "c1")), "go", budget=BUDGET)
    assert (outcome.status, outcome.value) == (Status.COMPLETED, "final: s")

    async def inside_a_loop() -> None:
        run_guarded_sync(agent_for(), "go", budget=BUDGET)

    with pytest.raises(RuntimeError, match="event loop is running"):
        asyncio.run(inside_a_loop())


def test_model_behavior_error_class_is_an_agents_exception() -> None:
    assert issubclass(ModelBehaviorError, agents.AgentsException)


# --- more endings -------------------------------------------------------------------------------------------


def test_after_validated_done_a_further_tool_call_does_not_run_and_the_task_stays_completed() -> None:
    for mode in ("end", "continue"):
        agent = agent_for(step("finish", {"summary": "s"}, "c1"), step("read_page", {"page": 4}, "c2"))
        outcome = asyncio.run(run_guarded(agent, "go", budget=BUDGET, on_refusal=mode))
        assert (outcome.status, outcome.value, outcome.used.tools) == (Status.COMPLETED, "final: s", 1)


def test_a_passed_deadline_stops_before_the_first_model_call() -> None:
    agent = agent_for()
    outcome = asyncio.run(run_guarded(agent, "go", budget=Budget(model_turns=5, tool_executions=5, deadline=1.0)))
    assert (outcome.status, outcome.reason, outcome.used.models) == (Status.STOPPED, Reason.DEADLINE, 0)
    assert agent.model.calls == ()  # type: ignore[attr-defined]


def test_stop_on_first_tool_with_a_refused_call_keeps_the_refusal_as_the_outcome() -> None:
    agent = agent_for(step("read_page", {"page": 1}, "c1"), tool_use_behavior="stop_on_first_tool")
    outcome = asyncio.run(run_guarded(agent, "go", budget=Budget(model_turns=5, tool_executions=0)))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.TOOL_BUDGET)
    assert "tool_budget" in outcome.result.final_output  # what the SDK took as its final output


def test_a_callable_approval_policy_still_decides_per_call() -> None:
    async def big(_ctx: Any, params: dict[str, Any], _call_id: str) -> bool:
        return bool(params["amount"] > 10)

    @guarded_tool(
        kind="write",
        operation_id=lambda a: f"transfer-{a['ref']}",
        verify=pay_verify,
        needs_approval=big,
    )
    def transfer(ref: str, amount: int) -> str:
        """Transfer money."""
        sent.append(ref)
        return "sent"

    batch = [
        function_call("transfer", {"ref": "small", "amount": 5}, call_id="c1"),
        function_call("transfer", {"ref": "big", "amount": 50}, call_id="c2"),
    ]
    outcome = asyncio.run(run_guarded(agent_for(batch, tools=[transfer]), "go", budget=BUDGET))
    assert (outcome.status, outcome.reason, sent) == (Status.NEEDS_HUMAN, Reason.APPROVAL, ["small"])
    assert [item.arguments for item in outcome.result.interruptions] == ['{"ref":"big","amount":50}']


def test_a_write_cancelled_while_its_verify_runs_is_still_in_flight() -> None:
    async def scenario() -> Any:
        verifying = asyncio.Event()

        async def slow_check(args: dict[str, Any], output: Any) -> dict[str, Any]:
            verifying.set()
            await asyncio.sleep(10)  # asks the receiver, which is slow to answer
            return {"revision": 1, "done": False, "effect": "committed"}

        @guarded_tool(kind="write", operation_id=lambda a: f"book-{a['room']}", verify=slow_check)
        async def book(room: int) -> str:
            """Book a room."""
            sent.append(f"book-{room}")
            return "booked?"

        store = MemoryStore()
        agent = agent_for(step("book", {"room": 7}, "c1"), tools=[book])
        task = asyncio.create_task(run_guarded(agent, "go", budget=BUDGET, store=store))
        await verifying.wait()
        task.cancel()
        return await task, store

    outcome, store = asyncio.run(scenario())
    assert (outcome.status, outcome.reason, outcome.operation_id) == (
        Status.NEEDS_RECONCILIATION,
        Reason.CANCELLED,
        "book-7",
    )
    assert outcome.in_flight == ("book[c1] operation book-7",) and sent == ["book-7"]
    assert store.lookup_operation("book-7").state is OperationState.UNKNOWN
