"""Properties of the guarded loop over random scripts: batches of parallel, malformed, unknown and duplicate calls,
transient and fatal HTTP errors, flaky tools. Whatever happens, one Outcome comes back and the counters hold."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget, Guard, MemoryStore, Outcome, RecoveryRecord, Status
from agents_loopguard.function_calling import RetryPolicy
from tests.support.scripted_openai import (
    ScriptedOpenAIServer,
    dynamic,
    final_text,
    function_call,
    http_error,
    tool_calls,
)
from tests.support.shop import Shop, proposed_ids, run_loop
from tests.support.wire import tool_outputs

CALLS = st.one_of(
    st.sampled_from([7, 42, 99]).map(lambda n: ("lookup_order", json.dumps({"order_id": n}))),
    st.tuples(st.sampled_from([7, 42]), st.sampled_from([1, 3])).map(
        lambda nv: ("confirm_order", json.dumps({"version": nv[1], "order_id": nv[0]}))  # key order varies too
    ),
    st.sampled_from(
        [
            ("lookup_order", '{"order_id": 4'),  # malformed JSON
            ("lookup_order", "[1, 2]"),  # not an object
            ("confirm_order", '{"order": 1}'),  # arguments that do not fit the function
            ("ghost_tool", "{}"),  # a tool the application never offered
        ]
    ),
)
TURNS = st.one_of(
    st.lists(CALLS, min_size=1, max_size=4).map(lambda calls: tool_calls(*(function_call(n, a) for n, a in calls))),
    st.just(final_text("All done.")),
    st.sampled_from([500, 503, 429]).map(lambda status: http_error(status, retry_after_ms=1)),
    st.sampled_from([400, 401, 403]).map(http_error),
)
SYNC_CLIENT = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test")
"""One connection pool for every example (each example's server has its own port)."""

FAULTS = st.lists(
    st.one_of(
        st.none(),
        st.tuples(
            st.sampled_from(["before", "after"]),
            st.sampled_from(
                [TimeoutError("slow"), ConnectionError("reset"), PermissionError("denied"), KeyError("bug")]
            ),
        ),
    ),
    max_size=4,
)


@pytest.mark.timeout(300)
@settings(
    max_examples=int(os.environ.get("LOOPGUARD_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    script=st.lists(TURNS, min_size=1, max_size=6),
    api=st.sampled_from(["chat", "responses"]),
    mode=st.sampled_from(["sync", "async"]),
    model_turns=st.integers(1, 6),
    tool_executions=st.integers(0, 6),
    model_retries=st.integers(0, 2),
    tool_retries=st.integers(0, 2),
    tool_choice=st.sampled_from([None, "auto", "required"]),
    done_on_confirm=st.booleans(),
    lookup_faults=FAULTS,
    confirm_faults=FAULTS,
)
def test_any_script_ends_in_one_outcome_with_counters_that_hold(
    script: list[Any],
    api: str,
    mode: str,
    model_turns: int,
    tool_executions: int,
    model_retries: int,
    tool_retries: int,
    tool_choice: str | None,
    done_on_confirm: bool,
    lookup_faults: list[Any],
    confirm_faults: list[Any],
) -> None:
    shop = Shop(done_on_confirm=done_on_confirm)
    shop.faults = {"lookup_order": list(lookup_faults), "confirm_order": list(confirm_faults)}
    store = MemoryStore()
    budget = Budget(model_turns=model_turns, tool_executions=tool_executions)
    guard = Guard(budget=budget, store=store, task_id="prop")
    seen: list[tuple[bool, int, Any]] = []  # per request, as it arrives: done validated?, executions, tool_choice

    def observed(step: Any) -> Any:
        def answer(body: dict[str, Any]) -> Any:
            seen.append((shop.done_reported, len(shop.executions), body.get("tool_choice")))
            return step

        return dynamic(answer)

    with ScriptedOpenAIServer([observed(step) for step in script]) as server:
        outcome = run_loop(
            server,
            api,
            mode,
            tools=shop.tools(RetryPolicy(max_retries=tool_retries, initial_delay=0)),
            guard=guard,
            tool_choice=tool_choice,
            model_retry=RetryPolicy(max_retries=model_retries, initial_delay=0),
            sync_client=SYNC_CLIENT,
        )
        requests = server.requests
        again = run_loop(server, api, "sync", tools=shop.tools(), guard=guard, sync_client=SYNC_CLIENT)
        assert len(server.requests) == len(requests)  # a finished guard asks nothing more

    assert isinstance(outcome, Outcome) and outcome.status in set(Status)
    assert again is outcome is guard.outcome
    # Model attempts: every request the server saw was reserved first, and the limit held.
    assert outcome.used.models == len(requests) == outcome.result.attempts <= model_turns
    # Tool executions: every execution was reserved first (retries included), and the limit held.
    assert outcome.used.tools == len(shop.executions) <= tool_executions
    # A committed write never runs again, and the ledger never claims a write the receiver does not have.
    assert shop.reruns_after_commit == []
    assert all(r.operation_id in shop.receipts for r in store.operations() if str(r.state) == "committed")
    # Completed only when the application's verify said done.
    if outcome.status is Status.COMPLETED:
        assert shop.done_reported
    # Every conversation sent answers each proposed call exactly once, under its call id.
    for request in requests[1:]:
        ids = proposed_ids(api, request.body)
        assert sorted(Counter(ids)) == sorted(tool_outputs(api, request.body)) == sorted(set(ids))
    # R12: once done is validated, no execution is left, or this is the budget's last model turn (no later turn
    # could read a tool's result), the request no longer lets the model call a tool.
    for turn, (done, executions, choice) in enumerate(seen, start=1):
        if done or executions >= tool_executions or turn >= model_turns:
            assert choice == "none"
        else:
            assert choice == tool_choice
    # The outcome survives as a recovery record.
    record = RecoveryRecord.from_json(outcome.record().to_json())
    assert (record.status, record.reason, record.used.models, record.used.tools) == (
        outcome.status,
        outcome.reason,
        outcome.used.models,
        outcome.used.tools,
    )
