"""The operator module on every backend: plain JSON-ready views, actions that raise the right error family."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_loopguard import (
    Budget,
    Guard,
    InputError,
    MemoryStore,
    NotFoundError,
    Reason,
    StateError,
    Status,
    Verdict,
    create_runner,
)
from agents_loopguard.ops.approvals import pause_digest
from agents_loopguard.ops.operator import (
    decide_pause,
    iso_time,
    operation_view,
    pause_view,
    pending_pauses,
    reconcile_operation,
    recover_task,
    stop_task,
    task_record,
    task_rows,
    task_view,
)
from agents_loopguard.ops.pages import task_page
from agents_loopguard.store.base import Store

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
PAY = {"tool": "pay", "kind": "write", "operation_id": "inv-7", "args": {"amount": 120, "api_key": "sk-live-123"}}
CALLS = [
    {"call_id": "c1", "tool": "pay", "arguments": '{"amount":5}', "operation_id": "inv-1"},
    {"call_id": "c2", "tool": "refund", "arguments": '{"amount":2}', "operation_id": "inv-2"},
]


def plain_json(value: Any) -> Any:
    """``value`` after a strict JSON round trip (no NaN, no default=): it must come back equal."""
    again = json.loads(json.dumps(value, allow_nan=False))
    assert again == value
    return again


def timestamps(value: Any) -> list[Any]:
    """Every value under a key that names a time (``at``, ``*_at``, ``deadline``)."""
    found: list[Any] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "at" or key.endswith("_at") or key == "deadline":
                found.append(item)
            else:
                found.extend(timestamps(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(timestamps(item))
    return found


def lost_payment(store: Store, task_id: str = "t-pay") -> None:
    def execute(call: Any) -> Any:
        raise TimeoutError("response lost")

    run = create_runner(
        budget=Budget(model_turns=6, tool_executions=4),
        store=store,
        task_id=task_id,
        execute=execute,
        verify=lambda call, result: None,
    )
    run([PAY])


def searched(store: Store, task_id: str = "t-search", steps: int = 3) -> None:
    # the engine alone (a cost limit is metered by an adapter's model requests; this task makes none)
    guard = Guard(budget=Budget(model_turns=10, tool_executions=10, cost=2.0), store=store, task_id=task_id)
    for i in range(steps):
        guard.begin_turn()
        ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": f"query {i}"}})
        assert not isinstance(ticket, Verdict)
        guard.settle(
            ticket, {"status": "ok", "hits": ["doc"]}, evidence={"revision": i + 1, "done": False, "effect": "none"}
        )
    guard.end(Verdict(Status.PARTIAL, Reason.PLAN_EXHAUSTED, "no proposal left and the task is not done"))


def paused(store: Store, task_id: str = "t-pause", pause_id: str = "p-1", digest: str | None = None) -> None:
    guard = Guard(budget=Budget(model_turns=6, tool_executions=4), store=store, task_id=task_id)
    guard.begin_turn()
    store.save_pause(
        task_id,
        pause_id,
        '{"run": "state"}',
        CALLS,
        digest=digest or pause_digest(task_id, '{"run": "state"}', CALLS),
        outcome=guard.finish(Status.NEEDS_HUMAN, Reason.APPROVAL, pause_id=pause_id).record().to_dict(),
        now=time.time(),
    )


# --- views --------------------------------------------------------------------------------------------------------


def test_task_rows_give_numbers_iso_times_and_filter_and_page(store: Store) -> None:
    lost_payment(store)
    searched(store)
    Guard(budget=Budget(1, 1), store=store, task_id="t-done").finish(Status.COMPLETED, Reason.VALIDATED_DONE)
    rows = plain_json(task_rows(store))
    assert [r["task_id"] for r in rows] == ["t-done", "t-search", "t-pay"], "newest first"
    pay = rows[2]
    assert (pay["status"], pay["reason"]) == ("needs_reconciliation", "executor_exception")
    assert pay["used"] == {"models": 1, "tools": 1, "cost": 0.0}
    assert pay["limits"] == {"models": 6, "tools": 4, "cost": None}
    assert pay["left"] == {"models": 5, "tools": 3, "cost": None}
    search = rows[1]
    assert search["limits"]["cost"] == 2.0 and search["left"]["cost"] == 2.0 and search["revision"] == 3
    for row in rows:
        assert ISO.match(row["created_at"]) and ISO.match(row["updated_at"]), row
        assert row["deadline"] is None and row["stop_mark"] is None
    assert [r["task_id"] for r in task_rows(store, status="completed")] == ["t-done"]
    assert [r["task_id"] for r in task_rows(store, status="partial")] == ["t-search"]
    assert [r["task_id"] for r in task_rows(store, limit=2)] == ["t-done", "t-search"]
    first = task_page(store, limit=2)
    assert [r["task_id"] for r in first["tasks"]] == ["t-done", "t-search"] and first["next"]
    last = task_page(store, limit=2, cursor=first["next"])
    assert [r["task_id"] for r in last["tasks"]] == ["t-pay"] and last["next"] is None


@pytest.mark.parametrize(
    "bad", [{"status": "finished"}, {"limit": -1}, {"limit": 0}, {"limit": True}, {"limit": "3"}, {"limit": 1001}]
)
def test_task_rows_refuse_bad_filters_as_input(store: Store, bad: dict[str, Any]) -> None:
    with pytest.raises(InputError) as raised:
        task_rows(store, **bad)
    assert not isinstance(raised.value, NotFoundError)


def test_task_view_of_a_lost_write(store: Store) -> None:
    lost_payment(store)
    view = plain_json(task_view(store, "t-pay"))
    assert view["task"]["outcome"]["reason"] == "executor_exception" and view["record_error"] is None
    assert [s["kind"] for s in view["timeline"]] == ["model", "tool"] and view["timeline_total"] == 2
    step = view["timeline"][1]
    assert step["arguments"] == {"amount": 120, "api_key": "[redacted]"}, "arguments are an object, redacted"
    assert step["result_class"] == "exception:TimeoutError" and step["operation_id"] == "inv-7"
    assert all(ISO.match(s["at"]) for s in view["timeline"])
    (operation,) = view["operations"]
    assert operation["state"] == "unknown" and operation["attempts"] == 1
    assert operation_view(store, "inv-7") == operation and operation["task_id"] == "t-pay"
    assert view["allowed_next_actions"] == ["query_operation_status", "human_review"]
    assert view["pauses"] == [] and view["transitions"] == []


def test_task_view_limit_keeps_the_last_steps(store: Store) -> None:
    searched(store, steps=4)
    full = task_view(store, "t-search")
    last = task_view(store, "t-search", limit=3)
    assert last["timeline_total"] == full["timeline_total"] == len(full["timeline"]) == 8
    assert last["timeline"] == full["timeline"][-3:]
    assert task_view(store, "t-search", limit=0)["timeline"] == []
    assert task_view(store, "t-search", limit=100)["timeline"] == full["timeline"]


def test_task_view_of_a_running_task_offers_stop_until_it_is_marked(store: Store) -> None:
    Guard(budget=Budget(3, 3), store=store, task_id="t-run").begin_turn()
    assert task_view(store, "t-run")["allowed_next_actions"] == ["stop"]
    stop_task(store, "t-run", reason="ops", who="ana")
    view = task_view(store, "t-run")  # its worker stops at its next dispatch, or died: reopening is a decision
    assert view["allowed_next_actions"] == ["recover"] and "loopguard recover t-run" in view["next_steps"][0]


def test_unknown_ids_are_not_found(store: Store) -> None:
    for call in (
        lambda: task_view(store, "nope"),
        lambda: task_record(store, "nope"),
        lambda: pause_view(store, "nope"),
        lambda: operation_view(store, "nope"),
        lambda: stop_task(store, "nope", reason="x", who="ana"),
        lambda: decide_pause(store, "nope", who="ana", approve_all=True),
        lambda: reconcile_operation(store, "nope", "committed", who="ops"),
        lambda: recover_task(store, "nope", who="lead", why="w"),
    ):
        with pytest.raises(NotFoundError):
            call()


def test_pause_view_and_pending_pauses(store: Store) -> None:
    paused(store)
    view = plain_json(pause_view(store, "p-1"))
    assert (view["status"], view["digest_ok"], view["task_id"]) == ("pending", True, "t-pause")
    assert [c["arguments"] for c in view["pending_calls"]] == [{"amount": 5}, {"amount": 2}]
    assert [c["decision"] for c in view["pending_calls"]] == [None, None]
    assert view["used"]["models"] == 1 and view["limits"]["models"] == 6 and view["left"]["models"] == 5
    assert ISO.match(view["created_at"]) and view["resumed_at"] is None
    (waiting,) = plain_json(pending_pauses(store))
    assert waiting["pause_id"] == "p-1" and waiting["task"]["status"] == "needs_human"
    assert waiting["task"]["left"] == {"models": 5, "tools": 4, "cost": None}
    decide_pause(store, "p-1", who="ana", approve_all=True)
    assert pending_pauses(store) == []


def test_a_pause_whose_digest_does_not_match_is_shown_and_refused(store: Store) -> None:
    paused(store, digest="0" * 64)
    assert pause_view(store, "p-1")["digest_ok"] is False
    with pytest.raises(StateError, match="digest"):
        decide_pause(store, "p-1", who="ana", approve_all=True)


def test_task_record(store: Store) -> None:
    lost_payment(store)
    record = plain_json(task_record(store, "t-pay"))
    assert record["status"] == "needs_reconciliation" and record["operation_id"] == "inv-7"
    Guard(budget=Budget(1, 1), store=store, task_id="t-run")
    with pytest.raises(StateError, match="no terminal outcome"):
        task_record(store, "t-run")


# --- actions ------------------------------------------------------------------------------------------------------


def test_stop_a_running_task_then_again(store: Store) -> None:
    lost_payment(store, task_id="t-other")
    Guard(budget=Budget(3, 3), store=store, task_id="t-run").begin_turn()
    first = plain_json(stop_task(store, "t-run", reason="runaway", who="ana"))
    assert first["stop_mark"] == "runaway" and first["set_now"] is True and first["status"] == "running"
    assert "stops at its next dispatch" in first["message"] and first["unknown_writes"] == []
    again = stop_task(store, "t-run", reason="second", who="bob")
    assert again["stop_mark"] == "runaway" and again["set_now"] is False and "already had" in again["message"]
    assert store.reserve_turn("t-run").reason is Reason.STOP_REQUESTED


def test_stop_a_finished_task_says_nothing_is_running_and_lists_unknown_writes(store: Store) -> None:
    lost_payment(store)
    stopped = stop_task(store, "t-pay", reason="audit password=hunter2", who="ana")
    assert "next dispatch" not in stopped["message"] and "nothing is running" in stopped["message"]
    assert stopped["unknown_writes"] == ["inv-7"] and "inv-7" in stopped["message"]
    assert "hunter2" not in json.dumps(stopped) and "hunter2" not in str(store.task("t-pay"))
    with pytest.raises(InputError):
        stop_task(store, "t-pay", reason="x", who="")


def test_decide_pause_says_rejected_and_refuses_bad_input_then_a_second_decision(store: Store) -> None:
    paused(store)
    with pytest.raises(InputError) as wrong:
        decide_pause(store, "p-1", who="ana", approve=["c1", "c9"])
    assert not isinstance(wrong.value, StateError) and "c9" in str(wrong.value)
    decided = plain_json(decide_pause(store, "p-1", who="ana", approve=["c1"], reject=["c2"], why="ok"))
    assert decided["decisions"] == {"c1": "approve", "c2": "reject"} and decided["decided_by"] == "ana"
    assert decided["status"] == "decided" and "c1 approved, c2 rejected" in decided["message"]
    assert [c["decision"] for c in decided["pending_calls"]] == ["approve", "reject"]
    with pytest.raises(StateError, match="final"):
        decide_pause(store, "p-1", who="bob", reject_all=True)


def test_reconcile_operation_reopens_then_refuses_by_state(store: Store) -> None:
    lost_payment(store)
    with pytest.raises(InputError, match="none of"):
        reconcile_operation(store, "inv-7", "maybe", who="ops")
    with pytest.raises(InputError):
        reconcile_operation(store, "inv-7", "committed", who="")
    unknown = reconcile_operation(store, "inv-7", "unknown", who="ops")
    assert unknown["state"] == "unknown" and unknown["task_reopened"] is False and "stays unknown" in unknown["message"]
    done = plain_json(reconcile_operation(store, "inv-7", "committed", who="ops", result={"receipt": "r-77"}))
    assert done["state"] == "committed" and done["task_reopened"] is True and done["task_status"] == "reopened"
    assert done["operation"]["result"] == {"receipt": "r-77"} and done["still_unknown"] == []
    assert done["transition"]["kind"] == "reconcile" and ISO.match(done["transition"]["at"])
    assert done["allowed_next_actions"] == ["return_result", "human_review"] and "reopened" in done["message"]
    with pytest.raises(StateError, match="already committed"):
        reconcile_operation(store, "inv-7", "not_committed", who="ops")
    assert task_view(store, "t-pay")["task"]["used"] == {"models": 1, "tools": 1, "cost": 0.0}


def test_recover_task_extends_limits_and_keeps_counters(store: Store) -> None:
    guard = Guard(budget=Budget(model_turns=2, tool_executions=2), store=store, task_id="t-r")
    guard.begin_turn()
    guard.finish(Status.STOPPED, Reason.MODEL_BUDGET)
    with pytest.raises(InputError):
        recover_task(store, "t-r", who="lead", why="")
    with pytest.raises(InputError):
        recover_task(store, "t-r", who="lead", why="w", extend={"model_turns": -1})
    done = plain_json(recover_task(store, "t-r", who="lead", why="two more", extend={"model_turns": 2}))
    assert done["task"]["status"] == "reopened" and done["task"]["limits"]["models"] == 4  # nothing runs it yet
    assert done["task"]["used"]["models"] == 1 and done["transition"]["budget_delta"] == {"model_turns": 2}
    assert "limits now 4 turns and 2 tool executions; used so far 1 turn and 0 tool executions" in done["message"]
    with pytest.raises(StateError, match="running"):
        recover_task(store, "t-r", who="lead", why="again")
    lost_payment(store)
    with pytest.raises(StateError, match="reconcil"):
        recover_task(store, "t-pay", who="lead", why="go")


def test_every_view_is_json_with_iso_times(store: Store) -> None:
    lost_payment(store)
    paused(store)
    searched(store)
    reconcile_operation(store, "inv-7", "committed", who="ops", result={"receipt": "r-1"})
    decide_pause(store, "p-1", who="ana", reject_all=True)
    views = [task_rows(store), pending_pauses(store), pause_view(store, "p-1")]
    views += [task_view(store, t) for t in ("t-pay", "t-pause", "t-search")]
    for view in views:
        for value in timestamps(plain_json(view)):
            assert value is None or ISO.match(value), value


# --- open-ended input ---------------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=_json, pause_args=_json)
def test_any_arguments_come_back_as_strict_json(args: Any, pause_args: Any) -> None:
    store = MemoryStore()
    run = create_runner(
        budget=Budget(3, 3),
        store=store,
        task_id="t",
        execute=lambda call: {"status": "ok", "echo": call["args"]},
        verify=lambda call, result: {"revision": 1, "done": True, "effect": "none"},
    )
    run([{"tool": "echo", "kind": "read", "args": args}])
    text = pause_args if isinstance(pause_args, str) else json.dumps(pause_args)
    calls = [{"call_id": "c1", "tool": "pay", "arguments": text, "operation_id": "op"}]
    Guard(budget=Budget(3, 3), store=store, task_id="p")
    store.save_pause("p", "p1", "{}", calls, digest=pause_digest("p", "{}", calls), outcome={"status": "needs_human"})
    view = task_view(store, "t")
    plain_json(view)
    plain_json(pause_view(store, "p1"))
    shown = view["timeline"][1]["arguments"]
    assert json.dumps(shown, allow_nan=False)
    if isinstance(args, dict):
        assert set(shown) == set(args), "redaction keeps every key"


def test_iso_time_is_utc_with_z() -> None:
    assert iso_time(0.001) == "1970-01-01T00:00:00.001Z"
    assert iso_time(1_700_000_000) == "2023-11-14T22:13:20.000Z"
    assert iso_time(float("nan")) is None and iso_time(None) is None
