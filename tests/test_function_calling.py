"""The guarded raw function-calling loop, with the real openai client against the scripted server over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import doctest
import json
import time
from typing import Any

import openai
import pytest

import agents_loopguard.function_calling.entry as function_calling_entry
import agents_loopguard.ops.triggers as triggers
import agents_loopguard.values.pricing as pricing
from agents_loopguard import Budget, Guard, MemoryStore, Policy, Reason, Status
from agents_loopguard.function_calling import (
    GuardedTool,
    LoopResult,
    RetryPolicy,
    ToolFailure,
    arun_chat_completions,
    arun_responses,
    run_chat_completions,
)
from tests.support.scripted_openai import (
    ScriptedOpenAIServer,
    dynamic,
    final_text,
    function_call,
    http_error,
    stall,
    tool_call,
    tool_calls,
)
from tests.support.shop import COMBOS, CONFIRM_42, MODEL, Shop, run_loop
from tests.support.wire import choices_sent, forced, scripted_server, tool_outputs

pytestmark = pytest.mark.timeout(60)

FAST = RetryPolicy(max_retries=2, initial_delay=0.0)
"""Three attempts without backoff (the scripted errors also say retry-after-ms: 1)."""


server = pytest.fixture(scripted_server, name="server")


# --------------------------------------------------------------------------- the loop


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_lookup_then_confirm_completes_and_drops_required_for_the_final_answer(
    server: ScriptedOpenAIServer, api: str, mode: str
) -> None:
    """Rules: R12 (tool_choice), R11 (outcomes)."""
    shop = Shop()
    server.add(
        tool_call("lookup_order", {"order_id": 42}),
        tool_call("confirm_order", CONFIRM_42),
        final_text("Order 42 is confirmed."),
    )
    outcome = run_loop(server, api, mode, tools=shop.tools(), tool_choice="required", budget=Budget(5, 5))

    assert (outcome.status, outcome.reason) == (Status.COMPLETED, Reason.VALIDATED_DONE)
    assert isinstance(outcome.result, LoopResult)
    assert outcome.result.final_text == "Order 42 is confirmed."
    assert outcome.value == {"status": "ok", "output": shop.receipts["confirm-order-42-v3"]}
    # R12: required while work remained; once validated done, nothing forces a tool any more.
    assert choices_sent(server) == ["required", "required", "none"]
    assert (outcome.used.models, outcome.used.tools) == (3, 2) == (len(server.requests), len(shop.executions))
    assert outcome.revision == 2
    # Outputs go back in each API's own shape, under the model's call ids.
    assert tool_outputs(api, server.requests[1].body) == {
        "call_1_0": json.dumps({"order_id": 42, "found": True, "version": 3, "status": "open"})
    }
    assert set(tool_outputs(api, server.requests[2].body)) == {"call_1_0", "call_2_0"}
    tools_sent = server.requests[0].body["tools"]
    names = [t["function"]["name"] if api == "chat" else t["name"] for t in tools_sent]
    assert names == ["lookup_order", "confirm_order"]
    assert all(r.headers["x-stainless-retry-count"] == "0" for r in server.requests)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_final_answer_false_ends_at_validated_done_without_another_request(
    server: ScriptedOpenAIServer, api: str
) -> None:
    shop = Shop()
    server.add(tool_call("confirm_order", CONFIRM_42), final_text("never asked"))
    outcome = run_loop(server, api, "sync", tools=shop.tools(), budget=Budget(5, 5), final_answer=False)
    assert outcome.reason is Reason.VALIDATED_DONE
    assert outcome.result.final_text is None
    assert len(server.requests) == outcome.used.models == 1
    assert server.remaining == 1


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_parallel_calls_each_go_through_the_guard_in_order(server: ScriptedOpenAIServer, api: str, mode: str) -> None:
    shop = Shop(done_on_confirm=False)
    server.add(
        tool_calls(
            function_call("lookup_order", {"order_id": 42}),
            function_call("lookup_order", {"order_id": 7}),
            function_call("confirm_order", CONFIRM_42),
        ),
        final_text("done?"),
    )
    outcome = run_loop(server, api, mode, tools=shop.tools(), budget=Budget(5, 5))
    assert [name for name, _ in shop.executions] == ["lookup_order", "lookup_order", "confirm_order"]
    assert outcome.used.tools == 3
    assert list(tool_outputs(api, server.requests[1].body)) == ["call_1_0", "call_1_1", "call_1_2"]
    assert (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)
    assert outcome.result.final_text == "done?"
    assert outcome.revision == 3


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize(
    ("name", "arguments", "detail"),
    [
        ("lookup_order", '{"order_id": 42', "not JSON"),
        ("lookup_order", "[42]", "not a JSON object"),
        ("lookup_order", '{"order": 42}', "do not fit lookup_order()"),
        ("delete_everything", "{}", "unknown tool 'delete_everything'"),
    ],
    ids=["malformed", "not-object", "wrong-args", "unknown-tool"],
)
def test_invalid_calls_are_refused_by_the_guard_before_any_execution(
    server: ScriptedOpenAIServer, api: str, name: str, arguments: str, detail: str
) -> None:
    """Rules: R1 (gate before execution), R4 (trace)."""
    shop = Shop()
    store = MemoryStore()
    server.add(tool_calls(function_call("lookup_order", {"order_id": 7}), function_call(name, arguments)))
    outcome = run_loop(server, api, "sync", tools=shop.tools(), budget=Budget(5, 5), store=store, task_id="t")
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.INVALID_CALL)
    assert detail in outcome.detail
    assert shop.executions == [("lookup_order", {"order_id": 7})]  # the valid sibling ran, the invalid one never
    assert outcome.used.tools == 1
    assert [e.result_class for e in store.trace("t") if e.kind == "tool"][-1] == "refused:invalid_call"
    # The conversation stays well formed: every proposed call has an output, the refusal included.
    outputs = tool_outputs(api, {"messages" if api == "chat" else "input": outcome.result.conversation})
    assert list(outputs) == ["call_1_0", "call_1_1"]
    assert outputs["call_1_1"].startswith("refused: stopped/invalid_call")


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_calls_after_validated_done_in_the_same_response_are_not_executed(
    server: ScriptedOpenAIServer, api: str
) -> None:
    """Rules: R12 (tool_choice), R11 (outcomes)."""
    shop = Shop()
    server.add(
        tool_calls(function_call("confirm_order", CONFIRM_42), function_call("lookup_order", {"order_id": 7})),
        tool_call("lookup_order", {"order_id": 7}),  # the model ignores tool_choice="none": still nothing runs
    )
    outcome = run_loop(server, api, "sync", tools=shop.tools(), tool_choice="required", budget=Budget(5, 5))
    assert outcome.reason is Reason.VALIDATED_DONE
    assert [name for name, _ in shop.executions] == ["confirm_order"]
    assert tool_outputs(api, server.requests[1].body)["call_1_1"].startswith("not executed")
    assert choices_sent(server) == ["required", "none"]


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_required_drops_to_none_when_no_tool_execution_is_left(
    server: ScriptedOpenAIServer, api: str, mode: str
) -> None:
    """Rules: R12 (tool_choice), R2 (separate counters)."""
    shop = Shop()

    def answer(body: dict[str, Any]) -> Any:
        if body.get("tool_choice") == "none":
            return final_text("I could not finish.")
        return tool_call("lookup_order", {"order_id": 7})

    server.add(tool_call("lookup_order", {"order_id": 42}), dynamic(answer))
    outcome = run_loop(server, api, mode, tools=shop.tools(), tool_choice="required", budget=Budget(5, 1))
    assert choices_sent(server) == ["required", "none"]
    assert (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)
    assert "tool budget ran out" in outcome.detail
    assert outcome.used.tools == 1


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_forced_function_that_ran_is_no_longer_forced(server: ScriptedOpenAIServer, api: str) -> None:
    """Rules: R12 (tool_choice)."""
    shop = Shop(done_on_confirm=False)
    server.add(tool_call("lookup_order", {"order_id": 42}), tool_call("confirm_order", CONFIRM_42), final_text("ok"))
    outcome = run_loop(
        server, api, "sync", tools=shop.tools(), tool_choice=forced(api, "lookup_order"), budget=Budget(5, 5)
    )
    assert choices_sent(server) == [forced(api, "lookup_order"), "auto", "auto"]
    assert outcome.reason is Reason.UNVERIFIED_FINAL


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_the_model_budget_ends_a_model_that_never_stops_calling(
    server: ScriptedOpenAIServer, api: str, mode: str
) -> None:
    shop = Shop()
    shop.orders.update({n: {"version": 1, "status": "open"} for n in range(10)})  # every lookup is a new fact
    server.add(*[tool_call("lookup_order", {"order_id": n}) for n in range(10)])
    outcome = run_loop(server, api, mode, tools=shop.tools(), budget=Budget(3, 10))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_BUDGET)
    assert len(server.requests) == outcome.used.models == 3
    assert shop.count("lookup_order") == 3


def test_the_same_call_at_the_same_revision_is_refused_before_its_third_execution(
    server: ScriptedOpenAIServer,
) -> None:
    """Rules: R7 (repetition and stall)."""
    shop = Shop()
    server.add(*[tool_call("lookup_order", {"order_id": 99}) for _ in range(5)])  # not found: no new fact
    outcome = run_loop(server, "chat", "sync", tools=shop.tools(), budget=Budget(10, 10))
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
    assert shop.count("lookup_order") == outcome.used.tools == 2
    assert len(server.requests) == 3


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_committed_write_proposed_again_returns_its_stored_result(server: ScriptedOpenAIServer, api: str) -> None:
    """Rules: R10 (writes and the ledger)."""
    shop = Shop(done_on_confirm=False)
    server.add(tool_call("confirm_order", CONFIRM_42), tool_call("confirm_order", CONFIRM_42), final_text("ok"))
    outcome = run_loop(server, api, "sync", tools=shop.tools(), budget=Budget(5, 5))
    assert shop.count("confirm_order") == 1 and shop.reruns_after_commit == []
    assert outcome.used.tools == 1
    first, second = (tool_outputs(api, server.requests[i].body) for i in (1, 2))
    assert second["call_2_0"] == first["call_1_0"] == json.dumps(shop.receipts["confirm-order-42-v3"])


def test_a_finished_guard_returns_the_same_outcome_and_asks_nothing(server: ScriptedOpenAIServer) -> None:
    shop = Shop()
    server.add(tool_call("confirm_order", CONFIRM_42), final_text("ok"))
    guard = Guard(budget=Budget(5, 5))
    first = run_loop(server, "chat", "sync", tools=shop.tools(), guard=guard)
    again = run_loop(server, "responses", "async", tools=shop.tools(), guard=guard)
    assert again is first
    assert len(server.requests) == 2


def test_the_stop_mark_set_from_elsewhere_is_seen_before_the_next_call(server: ScriptedOpenAIServer) -> None:
    """Rules: R3 (shared stop mark)."""
    store = MemoryStore()

    def lookup(order_id: int) -> dict[str, Any]:
        store.request_stop("task-stop", "operator")  # another shell marks the task stopped while a tool runs
        return {"order_id": order_id}

    tool = GuardedTool(
        "lookup_order", lookup, verify=lambda a, o: {"revision": a["order_id"], "done": False, "effect": "none"}
    )
    server.add(
        tool_calls(function_call("lookup_order", {"order_id": 1}), function_call("lookup_order", {"order_id": 2}))
    )
    outcome = run_loop(server, "chat", "sync", tools=[tool], budget=Budget(5, 5), store=store, task_id="task-stop")
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.STOP_REQUESTED)
    assert outcome.used.tools == 1


# --------------------------------------------------------------------------- model attempts: the loop owns retries


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_every_attempt_reserves_a_model_turn(server: ScriptedOpenAIServer, api: str, mode: str) -> None:
    """Rules: R1 (gate before execution), R2 (separate counters)."""
    shop = Shop()
    server.add(
        http_error(500, retry_after_ms=1),
        http_error(503, retry_after_ms=1),
        tool_call("confirm_order", CONFIRM_42),
        http_error(429, retry_after_ms=1),
        final_text("confirmed"),
    )
    store = MemoryStore()
    outcome = run_loop(
        server, api, mode, tools=shop.tools(), budget=Budget(10, 5), store=store, task_id="t", model_retry=FAST
    )
    assert outcome.reason is Reason.VALIDATED_DONE and outcome.result.final_text == "confirmed"
    assert len(server.requests) == outcome.used.models == outcome.result.attempts == 5
    # The client sent each attempt once (its own retries are off): the loop's retries are the only ones.
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0"] * 5
    classes = [e.result_class for e in store.trace("t") if e.kind == "model" and e.result_class != "reserved"]
    assert classes == ["error:500", "error:503", "answered", "error:429", "answered"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_transient_errors_stop_after_the_retry_policy_with_model_error(server: ScriptedOpenAIServer, mode: str) -> None:
    server.add(*[http_error(500, "boom", retry_after_ms=1) for _ in range(4)])
    outcome = run_loop(server, "chat", mode, tools=Shop().tools(), budget=Budget(10, 5), model_retry=FAST)
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_ERROR)
    assert "after 3 attempts" in outcome.detail and "boom" in outcome.detail
    assert len(server.requests) == outcome.used.models == 3
    assert [str(a) for a in outcome.record().allowed_next_actions] == ["bounded_retry", "deliver_verified", "close"]


def test_the_model_budget_bounds_retries_too(server: ScriptedOpenAIServer) -> None:
    server.add(*[http_error(502, retry_after_ms=1) for _ in range(4)])
    outcome = run_loop(server, "responses", "sync", tools=[], budget=Budget(2, 0), model_retry=FAST)
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_BUDGET)
    assert len(server.requests) == outcome.used.models == 2


def test_a_client_configured_with_many_retries_still_sends_one_request_per_attempt(
    server: ScriptedOpenAIServer,
) -> None:
    server.add(http_error(500, retry_after_ms=1), final_text("never reached"))
    outcome = run_loop(
        server,
        "chat",
        "sync",
        tools=[],
        budget=Budget(5, 0),
        client_options={"max_retries": 5},
        model_retry=RetryPolicy(max_retries=0),
    )
    assert outcome.reason is Reason.MODEL_ERROR
    assert len(server.requests) == outcome.used.models == 1


@pytest.mark.parametrize(("api", "mode"), COMBOS)
@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (http_error(401), Status.NEEDS_HUMAN, Reason.PERMISSION),
        (http_error(403), Status.NEEDS_HUMAN, Reason.PERMISSION),
        (http_error(429, code="insufficient_quota", retry_after_ms=1), Status.NEEDS_HUMAN, Reason.PERMISSION),
        (http_error(400, "bad tool schema"), Status.STOPPED, Reason.FATAL),
        (http_error(404), Status.STOPPED, Reason.FATAL),
        (http_error(500, should_retry=False), Status.STOPPED, Reason.MODEL_ERROR),
        (http_error(503, headers={"retry-after": "120"}), Status.STOPPED, Reason.MODEL_ERROR),
    ],
    ids=["401", "403", "quota", "400", "404", "no-retry-header", "retry-after-too-long"],
)
def test_errors_that_must_not_be_retried_are_sent_once(
    server: ScriptedOpenAIServer, api: str, mode: str, error: Any, status: Status, reason: Reason
) -> None:
    server.add(error, final_text("never reached"))
    outcome = run_loop(server, api, mode, tools=Shop().tools(), budget=Budget(5, 5), model_retry=FAST)
    assert (outcome.status, outcome.reason) == (status, reason)
    assert len(server.requests) == outcome.used.models == 1
    if status is Status.NEEDS_HUMAN:
        assert [str(a) for a in outcome.record().allowed_next_actions] == ["human_review"]


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_a_stalled_request_times_out_and_the_retry_is_another_reserved_turn(
    server: ScriptedOpenAIServer, api: str, mode: str
) -> None:
    shop = Shop()
    server.add(stall(30), tool_call("confirm_order", CONFIRM_42), final_text("confirmed"))
    store = MemoryStore()
    outcome = run_loop(
        server,
        api,
        mode,
        tools=shop.tools(),
        budget=Budget(5, 5),
        store=store,
        task_id="t",
        model_retry=FAST,
        client_options={"timeout": 0.3},
    )
    assert outcome.reason is Reason.VALIDATED_DONE
    assert len(server.requests) == outcome.used.models == 3
    assert "error:APITimeoutError" in [e.result_class for e in store.trace("t")]


def test_a_stall_without_retries_left_stops_with_model_error(server: ScriptedOpenAIServer) -> None:
    server.add(stall(30))
    outcome = run_loop(
        server,
        "responses",
        "async",
        tools=[],
        budget=Budget(5, 0),
        model_retry=RetryPolicy(max_retries=0),
        client_options={"timeout": 0.3},
    )
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_ERROR)
    assert "APITimeoutError" in outcome.detail
    assert len(server.requests) == outcome.used.models == 1


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_the_deadline_bounds_a_request_in_flight_with_the_clients_default_timeout(
    server: ScriptedOpenAIServer, api: str, mode: str
) -> None:
    """Issue: a stalled server held a worker for the client's own timeout (600 s by default), far past the deadline.
    Each request now goes out with ``timeout = min(client timeout, deadline - now)``; the run ends at the deadline.

    Rules: R2 (separate counters).
    """
    server.add(stall(30), final_text("too late"))
    store = MemoryStore()
    outcome = run_loop(
        server,
        api,
        mode,
        tools=[],
        budget=Budget(5, 0, deadline=time.time() + 1.0),
        store=store,
        task_id="t",
        model_retry=FAST,
    )
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.DEADLINE)
    assert len(server.requests) == outcome.used.models == 1
    assert "error:APITimeoutError" in [e.result_class for e in store.trace("t")]


def test_a_backoff_that_would_cross_the_deadline_stops_without_waiting(server: ScriptedOpenAIServer) -> None:
    clock = {"t": 0.0}
    guard = Guard(budget=Budget(5, 0, deadline=10.0), clock=lambda: clock["t"])
    server.add(http_error(503, headers={"retry-after": "30"}), final_text("never"))
    outcome = run_loop(
        server, "chat", "sync", tools=[], guard=guard, model_retry=RetryPolicy(max_retries=2, max_retry_after=60)
    )
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.DEADLINE)
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- tool attempts: adapter retries


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_a_read_retried_after_transient_failures_counts_every_attempt(
    server: ScriptedOpenAIServer, api: str, mode: str
) -> None:
    """Rules: R2 (separate counters)."""
    shop = Shop()
    shop.faults["lookup_order"] = [("before", TimeoutError("slow")), ("before", ConnectionError("reset"))]
    server.add(tool_call("lookup_order", {"order_id": 42}), final_text("Order 42 is open."))
    store = MemoryStore()
    outcome = run_loop(server, api, mode, tools=shop.tools(FAST), budget=Budget(5, 5), store=store, task_id="t")
    assert shop.count("lookup_order") == outcome.used.tools == 3  # max_retries=2 is three attempts
    assert outcome.reason is Reason.UNVERIFIED_FINAL
    assert [e.result_class for e in store.trace("t") if e.kind == "tool"] == ["retryable", "retryable", "ok"]
    assert json.loads(tool_outputs(api, server.requests[1].body)["call_1_0"])["status"] == "open"


def test_a_read_that_keeps_failing_reports_the_failure_to_the_model(server: ScriptedOpenAIServer) -> None:
    shop = Shop()
    shop.faults["lookup_order"] = [("before", TimeoutError("slow"))] * 3
    server.add(tool_call("lookup_order", {"order_id": 42}), final_text("The lookup failed."))
    outcome = run_loop(
        server, "chat", "sync", tools=shop.tools(FAST), budget=Budget(5, 5), policy=Policy(max_stalled=5)
    )
    assert shop.count("lookup_order") == outcome.used.tools == 3
    output = tool_outputs("chat", server.requests[1].body)["call_1_0"]
    assert output.startswith("error: TimeoutError: slow (3 attempts")
    assert outcome.reason is Reason.UNVERIFIED_FINAL


@pytest.mark.parametrize("prototype", [False, True])
def test_a_model_repeating_a_call_that_failed_is_still_bounded(server: ScriptedOpenAIServer, prototype: bool) -> None:
    """R21: a transient failure is a retry, whoever proposes it again, and the error-storm rule bounds the retries
    (Policy.max_failures); under the prototype's rules the model's own repeats stay under same_call."""
    shop = Shop()
    shop.faults["lookup_order"] = [("before", TimeoutError("slow"))] * 10
    server.add(*[tool_call("lookup_order", {"order_id": 42}) for _ in range(5)])
    outcome = run_loop(
        server,
        "chat",
        "sync",
        tools=shop.tools(RetryPolicy(max_retries=1, initial_delay=0)),
        budget=Budget(10, 10),
        policy=dataclasses.replace(Policy.prototype(), max_stalled=10) if prototype else Policy(),
    )
    if prototype:
        assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.SAME_CALL)
        assert shop.count("lookup_order") == outcome.used.tools == 2  # one call, one retry; the repeat is refused
    else:
        assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.ERROR_STORM)
        assert shop.count("lookup_order") == outcome.used.tools == 5  # three proposals, two retries: five failures


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_write_is_retried_only_when_verify_proves_it_did_not_happen(server: ScriptedOpenAIServer, mode: str) -> None:
    shop = Shop()
    shop.faults["confirm_order"] = [("before", TimeoutError("gateway"))]
    server.add(tool_call("confirm_order", CONFIRM_42), final_text("confirmed"))
    store = MemoryStore()
    outcome = run_loop(server, "responses", mode, tools=shop.tools(FAST), budget=Budget(5, 5), store=store)
    assert outcome.reason is Reason.VALIDATED_DONE
    assert shop.count("confirm_order") == outcome.used.tools == 2 and shop.reruns_after_commit == []
    (op,) = store.operations()
    assert (op.operation_id, str(op.state), op.attempts) == ("confirm-order-42-v3", "committed", 2)


@pytest.mark.parametrize(
    ("verify_says", "status", "reason"),
    [
        ("committed", Status.NEEDS_RECONCILIATION, Reason.RETRY_AFTER_COMMIT),
        ("unknown", Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT),
    ],
)
def test_a_write_whose_failed_attempt_may_have_happened_is_never_retried(
    server: ScriptedOpenAIServer, verify_says: str, status: Status, reason: Reason
) -> None:
    """Rules: R10 (writes and the ledger)."""
    seen: list[Any] = []

    def confirm(order_id: int, version: int) -> dict[str, Any]:
        seen.append(order_id)
        raise TimeoutError("the answer was lost")

    def verify(args: Any, output: Any) -> dict[str, Any]:
        assert isinstance(output, ToolFailure) and output.kind == "transient" and output.attempt == 1
        return {"revision": 0, "done": False, "effect": verify_says}

    tool = GuardedTool(
        "confirm_order", confirm, kind="write", operation_id=Shop.operation_id, verify=verify, retry=FAST
    )
    server.add(tool_call("confirm_order", CONFIRM_42))
    store = MemoryStore()
    outcome = run_loop(server, "chat", "sync", tools=[tool], budget=Budget(5, 5), store=store)
    assert (outcome.status, outcome.reason) == (status, reason)
    assert seen == [42] and outcome.used.tools == 1
    assert outcome.operation_id == "confirm-order-42-v3"


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_a_permission_error_is_never_retried(server: ScriptedOpenAIServer, api: str, mode: str) -> None:
    shop = Shop()
    shop.faults["confirm_order"] = [("before", PermissionError("token lacks orders:write"))] * 3
    server.add(tool_call("confirm_order", CONFIRM_42))
    outcome = run_loop(server, api, mode, tools=shop.tools(FAST), budget=Budget(5, 5))
    assert (outcome.status, outcome.reason) == (Status.NEEDS_HUMAN, Reason.PERMISSION)
    assert "orders:write" in outcome.detail
    assert shop.count("confirm_order") == outcome.used.tools == 1
    assert [str(a) for a in outcome.record().allowed_next_actions] == ["human_review"]


def test_the_tool_budget_bounds_retries(server: ScriptedOpenAIServer) -> None:
    shop = Shop()
    shop.faults["lookup_order"] = [("before", TimeoutError("slow"))] * 10
    server.add(tool_call("lookup_order", {"order_id": 42}))
    outcome = run_loop(
        server,
        "chat",
        "sync",
        tools=shop.tools(RetryPolicy(max_retries=5, initial_delay=0)),
        budget=Budget(5, 2),
        policy=Policy(max_stalled=10),
    )
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.TOOL_BUDGET)
    assert shop.count("lookup_order") == outcome.used.tools == 2


@pytest.mark.parametrize(
    ("tool", "status"),
    [("lookup_order", Status.STOPPED), ("confirm_order", Status.NEEDS_RECONCILIATION)],
)
def test_an_unclassified_tool_exception_ends_the_run_through_guard_fail(
    server: ScriptedOpenAIServer, tool: str, status: Status
) -> None:
    shop = Shop()
    shop.faults[tool] = [("before", ValueError("bug"))]
    args = {"order_id": 42} if tool == "lookup_order" else CONFIRM_42
    server.add(tool_call(tool, args))
    outcome = run_loop(server, "chat", "sync", tools=shop.tools(FAST), budget=Budget(5, 5))
    assert (outcome.status, outcome.reason) == (status, Reason.EXECUTOR_EXCEPTION)
    assert shop.count(tool) == 1


# --------------------------------------------------------------------------- cancellation (R3)


@pytest.mark.parametrize(("api", "hang_in"), [("chat", "tool"), ("responses", "tool"), ("chat", "verify")])
def test_cancelling_the_async_loop_records_the_write_in_flight(
    server: ScriptedOpenAIServer, api: str, hang_in: str
) -> None:
    """Rules: R3 (shared stop mark), R10 (writes and the ledger)."""
    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def confirm(order_id: int, version: int) -> dict[str, Any]:
        if hang_in == "tool":
            await hang()
        return {"receipt": "r-1"}

    async def verify(args: Any, output: Any) -> dict[str, Any]:  # asks the receiver over the network
        if hang_in == "verify":
            await hang()
        return {"revision": 1, "done": True, "effect": "committed"}

    tool = GuardedTool("confirm_order", confirm, kind="write", operation_id=Shop.operation_id, verify=verify)
    server.add(tool_call("confirm_order", CONFIRM_42))
    store = MemoryStore()
    guard = Guard(budget=Budget(5, 5), store=store, task_id="cancel-me")

    async def main() -> None:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test") as client:
            run = arun_chat_completions if api == "chat" else arun_responses
            kwargs: dict[str, Any] = (
                {"messages": [{"role": "user", "content": "go"}]} if api == "chat" else {"input": "go"}
            )
            task = asyncio.create_task(run(client, model=MODEL, tools=[tool], guard=guard, **kwargs))
            await asyncio.wait_for(started.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    outcome = guard.outcome
    assert outcome is not None
    assert (outcome.status, outcome.reason) == (Status.NEEDS_RECONCILIATION, Reason.CANCELLED)
    assert outcome.in_flight == ("call_1_0",)
    assert outcome.operation_id == "confirm-order-42-v3"
    assert [str(r.state) for r in store.operations()] == ["unknown"]  # nothing may re-send it blindly


# --------------------------------------------------------------------------- set-up errors and docs


def test_programming_errors_raise_before_anything_is_sent(server: ScriptedOpenAIServer) -> None:
    shop = Shop()
    kwargs: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    with openai.OpenAI(base_url=server.base_url, api_key="test") as client:
        with pytest.raises(ValueError, match="guard= or budget="):
            run_chat_completions(client, tools=shop.tools(), **kwargs)
        with pytest.raises(ValueError, match="not both"):
            run_chat_completions(
                client, tools=shop.tools(), guard=Guard(budget=Budget(1, 1)), budget=Budget(1, 1), **kwargs
            )
        with pytest.raises(ValueError, match="request_options may not set"):
            run_chat_completions(client, tools=[], budget=Budget(1, 1), request_options={"stream": True}, **kwargs)
        with pytest.raises(ValueError, match="two tools"):
            run_chat_completions(client, tools=shop.tools() + shop.tools()[:1], budget=Budget(1, 1), **kwargs)

        async def lookup(order_id: int) -> dict[str, Any]:
            return {}

        with pytest.raises(TypeError, match="async"):
            run_chat_completions(client, tools=[GuardedTool("lookup_order", lookup)], budget=Budget(1, 1), **kwargs)
    with pytest.raises(ValueError, match="operation_id"):
        GuardedTool("save", lambda: None, kind="write")
    with pytest.raises(ValueError, match="must match"):
        GuardedTool("has space", lambda: None)
    assert server.requests == []


def test_no_tools_means_no_tools_and_no_tool_choice_are_sent(server: ScriptedOpenAIServer) -> None:
    server.add(final_text("hi"))
    outcome = run_loop(server, "chat", "sync", tools=[], budget=Budget(1, 0), tool_choice="required")
    assert outcome.reason is Reason.UNVERIFIED_FINAL
    assert "tools" not in server.requests[0].body and "tool_choice" not in server.requests[0].body


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_assistant_message_with_tool_calls_goes_back_without_a_null_content(
    server: ScriptedOpenAIServer, mode: str
) -> None:
    """The conversation the next request sends: a tool-calling message without text has no ``content`` at all (a
    ``null`` costs the openai client a walk of the content type on every request); one with text keeps its text."""
    shop = Shop(done_on_confirm=False)
    server.add(
        tool_call("lookup_order", {"order_id": 42}),
        tool_calls(function_call("lookup_order", {"order_id": 42}, call_id="again"), text="Checking once more."),
        final_text("Order 42 is open."),
    )
    outcome = run_loop(server, "chat", mode, tools=shop.tools(), budget=Budget(5, 5))
    assert outcome.used.models == 3
    sent = [m for m in server.requests[2].body["messages"] if m["role"] == "assistant"]
    assert len(sent) == 2 and all(m["tool_calls"] for m in sent)
    assert "content" not in sent[0]
    assert sent[1]["content"] == "Checking once more."


@pytest.mark.parametrize("module", [function_calling_entry, pricing, triggers], ids=lambda m: m.__name__)
def test_docstring_examples_run(module: Any) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
