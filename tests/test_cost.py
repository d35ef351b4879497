"""The cost budget: reserve each request's worst case before it is sent, settle with the reported usage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
from agents_loopguard.function_calling import RetryPolicy, run_chat_completions
from agents_loopguard.values.pricing import Price, estimate_input_tokens, price_for
from tests.support.scripted_openai import ScriptedOpenAIServer, Usage, final_text, http_error, raw, stall, tool_call
from tests.support.shop import COMBOS, CONFIRM_42, MODEL, Shop, run_loop

pytestmark = pytest.mark.timeout(60)

# One unit per input token, two per output token: every amount below is exact.
PRICES = {MODEL: Price(input_per_million=1_000_000, output_per_million=2_000_000)}
WORST = 100 * 1 + 50 * 2
"""A request's reservation: 100 input tokens (the estimator below) and max_output_tokens=50."""
ACTUAL = 10 * 1 + 5 * 2
"""What a scripted answer with usage (10, 5) costs."""


def hundred_tokens(request: Any) -> int:
    return 100


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(usage=Usage(input_tokens=10, output_tokens=5)) as srv:
        yield srv


def costed(**kwargs: Any) -> dict[str, Any]:
    return {"prices": PRICES, "max_output_tokens": 50, "estimate_input_tokens": hundred_tokens, **kwargs}


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_each_request_settles_to_its_reported_usage(server: ScriptedOpenAIServer, api: str, mode: str) -> None:
    server.add(tool_call("confirm_order", CONFIRM_42, usage=Usage(30, 7)), final_text("confirmed"))
    outcome = run_loop(server, api, mode, tools=Shop().tools(), budget=Budget(5, 5, cost=1000), **costed())
    assert outcome.reason is Reason.VALIDATED_DONE
    assert outcome.used.cost == (30 + 7 * 2) + ACTUAL
    assert outcome.record().used.cost == outcome.used.cost
    key = "max_completion_tokens" if api == "chat" else "max_output_tokens"
    assert [r.body[key] for r in server.requests] == [50, 50]


@pytest.mark.parametrize(("api", "mode"), COMBOS)
def test_a_request_whose_worst_case_does_not_fit_is_never_sent(
    server: ScriptedOpenAIServer, api: str, mode: str
) -> None:
    server.add(tool_call("lookup_order", {"order_id": 42}), final_text("never sent"))
    budget = Budget(5, 5, cost=WORST + ACTUAL - 1)  # the first fits; after it settles, the second does not
    outcome = run_loop(server, api, mode, tools=Shop().tools(), budget=budget, **costed())
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.COST_BUDGET)
    assert len(server.requests) == 1
    assert outcome.used.models == 1  # a refused reservation takes no model turn either
    assert outcome.used.cost == ACTUAL
    assert [str(a) for a in outcome.record().allowed_next_actions] == ["deliver_verified", "close"]


def test_the_reservation_is_released_when_the_model_turn_is_refused(server: ScriptedOpenAIServer) -> None:
    server.add(tool_call("lookup_order", {"order_id": 42}), final_text("never sent"))
    outcome = run_loop(server, "chat", "sync", tools=Shop().tools(), budget=Budget(1, 5, cost=1000), **costed())
    assert outcome.reason is Reason.MODEL_BUDGET
    assert outcome.used.cost == ACTUAL


def test_an_error_answer_costs_nothing_and_a_timeout_keeps_its_worst_case(server: ScriptedOpenAIServer) -> None:
    """The API bills no error response; a request that timed out may have been served, so its reservation stays."""
    server.add(http_error(500, retry_after_ms=1), stall(30), final_text("ok"))
    outcome = run_loop(
        server,
        "chat",
        "sync",
        tools=[],
        budget=Budget(5, 0, cost=1000),
        model_retry=RetryPolicy(max_retries=2, initial_delay=0),
        client_options={"timeout": 0.3},
        **costed(),
    )
    assert outcome.reason is Reason.UNVERIFIED_FINAL
    assert len(server.requests) == outcome.used.models == 3
    assert outcome.used.cost == 0 + WORST + ACTUAL


def test_an_answer_without_usage_keeps_its_worst_case(server: ScriptedOpenAIServer) -> None:
    body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hello"}}],
    }
    server.add(raw(body))
    outcome = run_loop(server, "chat", "sync", tools=[], budget=Budget(5, 0, cost=1000), **costed())
    assert outcome.result.final_text == "hello"
    assert outcome.used.cost == WORST


def test_the_cost_budget_is_the_tasks_across_runs(server: ScriptedOpenAIServer) -> None:
    store = MemoryStore()
    server.add(final_text("one"), final_text("two"))
    budget = Budget(10, 0, cost=WORST + ACTUAL - 1)  # room for one request, not two
    first = run_loop(server, "chat", "sync", tools=[], budget=budget, store=store, task_id="t", **costed())
    assert first.used.cost == ACTUAL
    store.recover("t", who="ops", why="ask again")  # a new run of the same task continues its counters
    second = run_loop(server, "chat", "sync", tools=[], budget=budget, store=store, task_id="t", **costed())
    assert (second.status, second.reason) == (Status.STOPPED, Reason.COST_BUDGET)
    assert len(server.requests) == 1


def test_the_default_estimate_is_not_below_the_real_input(server: ScriptedOpenAIServer) -> None:
    text = "Confirm order 42 at version 3, please, and tell me the receipt number."
    request = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    assert estimate_input_tokens(request) >= len(text.encode())  # a token covers at least one byte
    assert estimate_input_tokens({**request, "tools": [{"type": "function"}]}) > estimate_input_tokens(request)
    server.add(final_text("ok"))
    guard = Guard(budget=Budget(5, 0, cost=1.0))
    prices = {"gpt-4o-mini": Price(input_per_million=0.15, output_per_million=0.60)}
    outcome = run_loop(server, "chat", "sync", tools=[], guard=guard, prices=prices, max_output_tokens=100)
    assert outcome.used.cost == pytest.approx((10 * 0.15 + 5 * 0.60) / 1e6)


def test_a_cost_budget_needs_a_price_and_a_bound_on_the_output(server: ScriptedOpenAIServer) -> None:
    with openai.OpenAI(base_url=server.base_url, api_key="test") as client:
        ask: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": []}
        with pytest.raises(ValueError, match="prices="):
            run_chat_completions(client, budget=Budget(1, 0, cost=1.0), max_output_tokens=10, **ask)
        with pytest.raises(ValueError, match="max_output_tokens"):
            run_chat_completions(client, budget=Budget(1, 0, cost=1.0), prices=PRICES, **ask)
        with pytest.raises(ValueError, match="no entry for model"):
            run_chat_completions(
                client, budget=Budget(1, 0, cost=1.0), prices={"o3": Price(1, 1)}, max_output_tokens=10, **ask
            )
    assert server.requests == []


def test_a_price_table_is_only_required_to_price_the_model_when_there_is_a_cost_budget(
    server: ScriptedOpenAIServer,
) -> None:
    """R2: without a cost budget nothing is metered, so a table that lacks the model is accepted (as in the SDK
    adapter; the raw loop used to refuse it)."""
    server.add(final_text("ok"))
    with openai.OpenAI(base_url=server.base_url, api_key="test") as client:
        outcome = run_chat_completions(
            client,
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            tools=[],
            budget=Budget(1, 0),
            prices={"o3": Price(1, 1)},
        )
    assert outcome.reason is Reason.UNVERIFIED_FINAL and len(server.requests) == 1


def test_price_table_lookup_and_validation() -> None:
    table = {"gpt-4o": Price(2.5, 10.0), "gpt-4o-mini": Price(0.15, 0.6)}
    assert price_for(table, "gpt-4o-mini-2024-07-18") is table["gpt-4o-mini"]
    assert price_for(table, "gpt-4o-2024-08-06") is table["gpt-4o"]
    assert price_for(table, "gpt-4") is None
    with pytest.raises(ValueError):
        Price(input_per_million=-1, output_per_million=1)
    with pytest.raises(ValueError):
        Price(input_per_million=float("nan"), output_per_million=1)
