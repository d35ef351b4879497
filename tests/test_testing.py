"""agents_loopguard.sdk.testing: a guarded tool called in a unit test, without a model, through the guarded path."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import agents
import pytest
from agents import Agent, RunContextWrapper, function_tool
from agents.exceptions import ToolTimeoutError, UserError
from agents.testing import ScriptedModel, assistant_message
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agents_loopguard import Budget, MemoryStore, OperationState, Policy, Reason, Status, Store
from agents_loopguard.sdk import guarded_tool
from agents_loopguard.sdk.testing import DEFAULT_BUDGET, ToolCallResult, call_tool, call_tool_sync
from tests.support.sdk import sdk_tool_error

pytestmark = pytest.mark.timeout(60)
agents.set_tracing_disabled(True)

COMMITTED = {"revision": 1, "done": False, "effect": "committed"}
SDK_MESSAGE = sdk_tool_error(RuntimeError("backend down"))  # the SDK's default failure policy, for this body


def payments(sent: list[int]) -> Any:
    @guarded_tool(kind="write", operation_id=lambda a: f"pay-{a['order']}", verify=lambda a, out: COMMITTED)
    def pay(order: int, amount: float) -> dict[str, Any]:
        """Pay an order."""
        sent.append(order)
        return {"receipt": f"r-{order}"}

    return pay


# --- what one call gives -------------------------------------------------------------------------------------


def test_a_read_returns_its_output_and_counts_one_execution_and_no_model_turn(store: Store) -> None:
    seen: list[str] = []

    @guarded_tool
    async def search(q: str) -> str:
        """Search."""
        seen.append(q)
        return f"hits for {q}"

    result = call_tool_sync(search, {"q": "refunds"}, store=store, task_id="t-read")
    assert isinstance(result, ToolCallResult)
    assert (result.output, result.verdict, result.outcome, result.error, seen) == (
        "hits for refunds",
        None,
        None,
        None,
        ["refunds"],
    )
    assert (result.guard.task_id, result.guard.used.tools, result.guard.used.models) == ("t-read", 1, 0)
    stored = store.task("t-read")
    assert stored is not None and stored.outcome is None and stored.used.tools == 1  # the task goes on
    assert stored.budget == DEFAULT_BUDGET


def test_a_committed_write_called_twice_runs_once_in_a_task_and_across_tasks(store: Store) -> None:
    sent: list[int] = []
    pay = payments(sent)
    first = call_tool_sync(pay, {"order": 42, "amount": 5}, store=store, task_id="t1")
    again = call_tool_sync(pay, {"amount": 5.0, "order": 42}, store=store, task_id="t1")  # other key order
    other_task = call_tool_sync(pay, {"order": 42, "amount": 5}, store=store, task_id="t2")
    assert sent == [42]
    assert first.output == again.output == other_task.output == {"receipt": "r-42"}
    assert (again.verdict, again.guard.used.tools, other_task.guard.used.tools) == (None, 1, 0)
    (record,) = store.operations()
    assert (record.operation_id, record.state, record.result) == (
        "pay-42",
        OperationState.COMMITTED,
        {"status": "ok", "output": {"receipt": "r-42"}},
    )


def test_the_async_twin_gives_the_same_result() -> None:
    sent: list[int] = []
    pay = payments(sent)
    store = MemoryStore()

    async def twice() -> list[ToolCallResult]:
        return [await call_tool(pay, {"order": 7, "amount": 1}, store=store) for _ in range(2)]

    first, second = asyncio.run(twice())
    assert (sent, first.output, second.output) == ([7], {"receipt": "r-7"}, {"receipt": "r-7"})
    assert first.guard.task_id != second.guard.task_id  # without task_id= every call is a task of its own


def test_calls_of_one_task_continue_its_counters_and_its_rules() -> None:
    ran: list[str] = []

    @guarded_tool
    def lookup(city: str) -> str:
        """Look up."""
        ran.append(city)
        return f"found {city}"

    store = MemoryStore()
    results = [call_tool_sync(lookup, {"city": "Oslo"}, store=store, task_id="loop") for _ in range(3)]
    assert [r.verdict for r in results[:2]] == [None, None]
    third = results[2]
    assert third.verdict is not None and third.outcome is not None
    assert (third.outcome.status, third.outcome.reason, ran) == (Status.STOPPED, Reason.SAME_CALL, ["Oslo", "Oslo"])
    assert third.output.startswith("refused: stopped/same_call")
    # the task ended (sticky): a later call is refused and runs nothing
    after = call_tool_sync(lookup, {"city": "Bergen"}, guard=third.guard)
    assert (after.outcome, ran) == (third.outcome, ["Oslo", "Oslo"])


# --- refusals never run the body ---------------------------------------------------------------------------


def test_a_refused_call_never_runs_the_body_and_ends_the_run() -> None:
    ran: list[int] = []

    @guarded_tool
    def fetch(n: int) -> str:
        """Fetch."""
        ran.append(n)
        return "x"

    broke = call_tool_sync(fetch, {"n": 1}, budget=Budget(model_turns=1, tool_executions=0))
    assert broke.outcome is not None and broke.verdict is not None
    assert (broke.outcome.status, broke.outcome.reason, broke.guard.used.tools) == (
        Status.STOPPED,
        Reason.TOOL_BUDGET,
        0,
    )
    for bad in ({"n": "not a number"}, "{not json", "[1, 2]"):
        refused = call_tool_sync(fetch, bad)
        assert refused.outcome is not None and refused.outcome.reason is Reason.INVALID_CALL, bad
        assert refused.guard.used.tools == 0
    # what the model reads: the guard's refusal, for text that is no JSON object and for arguments the schema
    # rejects alike (it used to read the SDK's generic failure message for the latter, as the raw loop never did)
    assert "invalid_call" in call_tool_sync(fetch, "{not json").output
    schema = call_tool_sync(fetch, {"n": "not a number"}).output
    assert "invalid_call" in schema and "do not match its JSON schema" in schema and schema != SDK_MESSAGE
    assert ran == []


def test_in_continue_mode_a_refusal_is_told_and_the_task_goes_on() -> None:
    @guarded_tool
    def fetch(n: int) -> str:
        """Fetch."""
        return "x"

    told = call_tool_sync(fetch, "{oops", on_refusal="continue")
    assert told.verdict is not None and told.outcome is None
    assert (told.verdict.reason, told.guard.outcome) == (Reason.INVALID_CALL, None)
    assert "not valid JSON" in told.output


JSON_VALUES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
ARGUMENTS = st.one_of(
    st.text(max_size=40),  # whatever text the model sends
    st.dictionaries(st.sampled_from(["n", "m"]) | st.text(max_size=3), JSON_VALUES, max_size=3),
    st.builds(lambda n: {"n": n}, st.integers()),  # valid calls
)


@settings(max_examples=60, deadline=None)
@given(raw=ARGUMENTS)
def test_any_arguments_run_the_body_once_or_are_refused_without_running_it(raw: Any) -> None:
    ran: list[int] = []

    @guarded_tool(verify=lambda a, out: {"revision": 0, "done": False, "effect": "none"})
    def fetch(n: int) -> str:
        """Fetch."""
        ran.append(n)
        return "x"

    result = call_tool_sync(fetch, raw)
    assert result.error is None
    if result.verdict is None:  # a valid call: the body ran once, and the task goes on
        assert (len(ran), result.guard.used.tools, result.output) == (1, 1, "x")
    else:
        assert result.verdict.reason is Reason.INVALID_CALL
        assert (ran, result.guard.used.tools) == ([], 0)
        assert result.outcome is not None and result.outcome.reason is Reason.INVALID_CALL


# --- evidence and failures ---------------------------------------------------------------------------------


def test_verified_done_is_the_verdict_and_the_model_would_answer_next() -> None:
    @guarded_tool(verify=lambda a, out: {"revision": 2, "done": True, "effect": "none"})
    def finish(ticket: str) -> str:
        """Finish."""
        return f"closed {ticket}"

    result = call_tool_sync(finish, {"ticket": "T-1"})
    assert result.verdict is not None and result.outcome is None
    assert (result.verdict.status, result.verdict.reason, result.output) == (
        Status.COMPLETED,
        Reason.VALIDATED_DONE,
        "closed T-1",
    )
    assert result.guard.revision == 2


def test_a_body_that_raises_is_formatted_by_the_tools_failure_policy() -> None:
    def apologise(_ctx: RunContextWrapper[Any], error: Exception) -> str:
        return f"sorry: {error}"

    async def backend(q: str) -> str:
        """Ask the backend."""
        raise RuntimeError("backend down")

    default = call_tool_sync(guarded_tool(backend), {"q": "x"})
    custom = call_tool_sync(guarded_tool(failure_error_function=apologise)(backend), {"q": "x"}, on_refusal="continue")
    raising = call_tool_sync(guarded_tool(failure_error_function=None)(backend), {"q": "x"})
    assert default.outcome is not None and default.outcome.reason is Reason.EXECUTOR_EXCEPTION
    assert (default.output, default.error) == (SDK_MESSAGE, None)
    assert custom.verdict is not None and custom.outcome is None  # told, and the run would go on
    assert (custom.output, custom.verdict.reason) == ("sorry: backend down", Reason.EXECUTOR_EXCEPTION)
    assert raising.outcome is not None and isinstance(raising.error, RuntimeError)
    assert (raising.output, raising.outcome.reason) == (None, Reason.EXECUTOR_EXCEPTION)


def test_a_write_that_raises_stays_unknown_and_needs_reconciliation(store: Store) -> None:
    @guarded_tool(kind="write", operation_id=lambda a: f"mail-{a['to']}", verify=lambda a, out: COMMITTED)
    async def mail(to: str) -> str:
        """Send mail."""
        raise ConnectionResetError("connection reset after the request was sent")

    result = call_tool_sync(mail, {"to": "ops"}, store=store, task_id="t-mail")
    assert result.outcome is not None and result.outcome.status is Status.NEEDS_RECONCILIATION
    (record,) = store.operations()
    assert (record.operation_id, record.state) == ("mail-ops", OperationState.UNKNOWN)
    again = call_tool_sync(mail, {"to": "ops"}, store=store)  # another task: the same operation is refused
    assert again.outcome is not None and again.outcome.status is Status.NEEDS_RECONCILIATION
    assert again.guard.used.tools == 0


@pytest.mark.parametrize("behavior", ["error_as_result", "raise_exception"])
def test_a_tool_timeout_ends_as_the_run_would_end_it(behavior: Any) -> None:
    @guarded_tool(
        kind="write",
        operation_id=lambda a: f"slow-{a['n']}",
        verify=lambda a, out: COMMITTED,
        timeout=0.05,
        timeout_behavior=behavior,
    )
    async def slow(n: int) -> str:
        """Slow write."""
        await asyncio.sleep(30)
        return "never"

    result = call_tool_sync(slow, {"n": 1})
    assert result.outcome is not None
    assert (result.outcome.status, result.outcome.reason) == (Status.NEEDS_RECONCILIATION, Reason.TOOL_TIMEOUT)
    if behavior == "raise_exception":
        assert isinstance(result.error, ToolTimeoutError) and result.output is None
    else:
        assert result.error is None and "timed out" in result.output


class Receipt(BaseModel):
    id: str


def test_a_programming_error_ends_the_task_as_fatal_and_is_raised() -> None:
    @guarded_tool(output_type=Receipt, failure_error_function=None)
    def save(n: int) -> Receipt:
        """Save."""
        return {"id": n}  # type: ignore[return-value]  # the bug: not a Receipt

    store = MemoryStore()
    with pytest.raises(UserError, match="does not match its declared output type"):
        call_tool_sync(save, {"n": 1}, store=store, task_id="bug")
    outcome = store.task("bug").outcome  # type: ignore[union-attr]
    assert outcome is not None and (outcome["status"], outcome["reason"]) == ("stopped", "fatal")


# --- what the tool sees, and what it accepts --------------------------------------------------------------------


def test_the_tool_sees_the_context_and_the_guard_of_its_task() -> None:
    from agents_loopguard.sdk import current_guard

    @guarded_tool
    def tenant_of(ctx: RunContextWrapper[Any], q: str) -> str:
        """Which tenant asks."""
        guard = current_guard()
        return f"{ctx.context['tenant']}:{q}:{guard.task_id if guard else None}"

    result = call_tool_sync(tenant_of, {"q": "x"}, context={"tenant": "t-1"}, task_id="ctx")
    assert result.output == "t-1:x:ctx"


def test_a_plain_function_tool_is_guarded_as_an_undeclared_read() -> None:
    @function_tool
    def plain(q: str) -> str:
        """Plain."""
        return q

    policy = Policy(max_unverified=2)
    first = call_tool_sync(plain, {"q": "a"}, policy=policy, task_id="plain")
    assert (first.output, first.verdict, first.guard.used.tools) == ("a", None, 1)
    second = call_tool_sync(plain, {"q": "b"}, guard=first.guard)
    assert second.outcome is not None and second.outcome.reason is Reason.NO_PROGRESS  # nobody verifies it


def test_a_tool_that_needs_approval_is_called_as_if_approved() -> None:
    sent: list[int] = []

    @guarded_tool(kind="write", operation_id=lambda a: f"pay-{a['order']}", verify=lambda a, out: COMMITTED)
    def pay(order: int) -> str:
        """Pay."""
        sent.append(order)
        return "paid"

    approved = dataclasses.replace(pay, needs_approval=True)
    assert (call_tool_sync(approved, {"order": 3}).output, sent) == ("paid", [3])


def test_an_agent_used_as_a_tool_counts_its_model_turns_against_the_same_task() -> None:
    inner = Agent(name="researcher", model=ScriptedModel([[assistant_message("42 results")]]))
    tool = inner.as_tool(tool_name="research", tool_description="Research a question.")
    result = call_tool_sync(tool, {"input": "how many?"}, budget=Budget(model_turns=3, tool_executions=3))
    assert (result.output, result.verdict) == ("42 results", None)
    assert (result.guard.used.models, result.guard.used.tools) == (1, 1)
    broke = call_tool_sync(tool, {"input": "again"}, budget=Budget(model_turns=0, tool_executions=3))
    assert broke.outcome is not None and broke.outcome.reason is Reason.MODEL_BUDGET


def test_misuse_gets_a_clear_error() -> None:
    with pytest.raises(TypeError, match="needs a FunctionTool"):
        call_tool_sync(lambda: "x", {})  # type: ignore[arg-type]

    @guarded_tool
    def search(q: str) -> str:
        """Search."""
        return q

    async def inside_a_loop() -> None:
        call_tool_sync(search, {"q": "x"})

    with pytest.raises(RuntimeError, match=r"cannot be called while an event loop is running: await call_tool\(\)"):
        asyncio.run(inside_a_loop())
    with pytest.raises(ValueError, match="pass either guard= or budget="):
        first = call_tool_sync(search, {"q": "x"})
        call_tool_sync(search, {"q": "x"}, guard=first.guard, budget=DEFAULT_BUDGET)
