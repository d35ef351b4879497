"""Approval pauses, reconciliation and explicit recovery through the Agents SDK flow (ScriptedModel), on every store.

What is stored when a run pauses, which resumes are refused (and that nothing runs then), and how a task goes on
after a lost write is reconciled or a stopped task is recovered: the counters always continue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import agents
import pytest
import sqlalchemy as sa
from agents import Agent
from agents.testing import ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, Guard, OperationState, Policy, Reason, Status, Usage
from agents_loopguard.ops.approvals import DecisionError, PauseTampered, decide, pause_digest
from agents_loopguard.ops.recovery import RecoveryError, reconcile, recover
from agents_loopguard.sdk import (
    ResumeError,
    guarded_tool,
    resume_guarded,
    resume_guarded_sync,
    run_guarded_sync,
)
from agents_loopguard.store import MemoryStore, PauseAlreadyResumed, SQLStore, Store
from tests.support.sdk import committed, guarded_outcome, told, told_by_id

pytestmark = pytest.mark.timeout(60)
agents.set_tracing_disabled(True)

sent: list[str] = []
lost_answers: list[bool] = []
"""For ``ship``: True while the carrier's answers get lost (popped per execution; empty: answered)."""


@pytest.fixture(autouse=True)
def _clean() -> None:
    sent.clear()
    lost_answers.clear()


@guarded_tool(kind="write", operation_id=lambda a: f"refund-order-{a['order']}", verify=committed, needs_approval=True)
def refund(order: int) -> str:
    """Refund an order (a human approves it)."""
    sent.append(f"refund-{order}")
    return f"refunded {order}"


@guarded_tool(verify=lambda a, out: {"revision": int(a["n"]), "done": False, "effect": "none"})
def lookup(n: int) -> str:
    """Read page n."""
    return f"page {n}"


@guarded_tool(
    kind="write",
    operation_id=lambda a: f"ship-order-{a['order']}",
    verify=lambda a, out: {"revision": 2, "done": True, "effect": "committed"},
)
def ship(order: int) -> str:
    """Book the shipment of an order with the carrier."""
    sent.append(f"ship-{order}")
    if lost_answers and lost_answers.pop(0):
        raise TimeoutError("the carrier took the booking; its answer was lost")
    return f"shipment {order} booked"


def call(name: str, args: dict[str, Any], cid: str) -> list[Any]:
    return [function_call(name, args, call_id=cid)]


def clerk(*steps: Any) -> Agent[Any]:
    return Agent(name="clerk", model=ScriptedModel(list(steps)), tools=[refund, lookup, ship])


BUDGET = Budget(model_turns=6, tool_executions=6)


def pause(store: Store, task_id: str = "t1", *turns: list[Any], policy: Policy | None = None) -> Any:
    first = turns or (call("refund", {"order": 5}, "c1"),)
    outcome = run_guarded_sync(
        clerk(*first), "refund order 5", budget=BUDGET, store=store, task_id=task_id, policy=policy
    )
    assert (outcome.status, outcome.reason) == (Status.NEEDS_HUMAN, Reason.APPROVAL)
    assert outcome.pause_id is not None
    return outcome


# --- what a pause stores ------------------------------------------------------------------------------------


def test_an_approval_pause_is_stored_by_default_with_the_budget_and_counters(store: Store) -> None:
    outcome = pause(store, "t1", call("lookup", {"n": 1}, "c0"), call("refund", {"order": 5}, "c1"))
    record = store.pause(outcome.pause_id)
    assert record is not None
    assert (record.task_id, record.status, record.budget, record.used) == ("t1", "pending", BUDGET, Usage(2, 1))
    assert record.pending_calls == (
        {
            "call_id": "c1",
            "tool": "refund",
            "kind": "write",
            "arguments": '{"order":5}',
            "operation_id": "refund-order-5",
        },
    )
    state = json.loads(record.state)  # the SDK's RunState JSON, conversation included
    assert state["current_turn"] == 2 and "refund order 5" in json.dumps(state["original_input"])
    assert record.digest == pause_digest("t1", record.state, record.pending_calls)
    task = store.task("t1")
    assert task is not None and task.status == "needs_human" and task.outcome is not None
    assert (task.outcome["reason"], task.outcome["pause_id"]) == ("approval", outcome.pause_id)
    assert outcome.record().allowed_next_actions == ["human_review"]
    assert sent == []


def test_a_streamed_run_stores_its_pause_too(store: Store) -> None:
    agent = clerk(call("refund", {"order": 5}, "c1"))
    outcome = asyncio.run(guarded_outcome(agent, "go", stream=True, budget=BUDGET, store=store, task_id="t-stream"))
    assert outcome.status is Status.NEEDS_HUMAN and store.pause(outcome.pause_id or "") is not None


def test_an_application_on_pause_replaces_the_default(store: Store) -> None:
    outcome = run_guarded_sync(
        clerk(call("refund", {"order": 5}, "c1")),
        "go",
        budget=BUDGET,
        store=store,
        task_id="t-own",
        on_pause=lambda result, guard: None,
    )
    assert (outcome.status, outcome.pause_id, store.pauses("t-own")) == (Status.NEEDS_HUMAN, None, [])


# --- resuming ----------------------------------------------------------------------------------------------


def test_decisions_apply_to_exactly_the_pause_calls_and_the_resume_is_recorded(store: Store) -> None:
    both = [function_call("refund", {"order": 5}, call_id="c1"), function_call("refund", {"order": 6}, call_id="c2")]
    paused = pause(store, "t1", both)
    model = ScriptedModel([[assistant_message("refunded 5, not 6")]])
    resumed = resume_guarded_sync(
        Agent(name="clerk", model=model, tools=[refund, lookup, ship]),
        paused.pause_id,
        store=store,
        who="ana",
        decisions={"c1": "approve", "c2": "reject"},
        why="6 was already refunded by hand",
        rejection_message="refund of order 6 refused by ana",
    )
    assert sent == ["refund-5"]
    assert (resumed.status, resumed.used) == (Status.PARTIAL, Usage(2, 1))  # counters went on from 1 turn, 0 tools
    outputs = told_by_id(model.last_call.input)
    assert outputs == {"c1": "refunded 5", "c2": "refund of order 6 refused by ana"}
    [transition] = store.transitions("t1")
    assert (transition.kind, transition.who, transition.why, transition.pause_id) == (
        "resume",
        "ana",
        "6 was already refunded by hand",
        paused.pause_id,
    )
    assert transition.decisions == {"c1": "approve", "c2": "reject"} and transition.at > 0
    record = store.pause(paused.pause_id)
    assert record is not None and (record.status, record.resumed_by) == ("resumed", "ana")


def test_the_recorded_decisions_of_an_operator_are_applied(store: Store) -> None:
    paused = pause(store)
    decide(store, paused.pause_id, who="ana", reject_all=True, why="not this customer")
    resumed = resume_guarded_sync(clerk([assistant_message("ok")]), paused.pause_id, store=store, who="worker-2")
    assert sent == [] and resumed.used == Usage(2, 0)
    [transition] = store.transitions("t1")
    assert (transition.who, transition.decisions) == ("worker-2", {"c1": "reject"})
    assert store.pause(paused.pause_id).decided_by == "ana"  # type: ignore[union-attr]


def assert_nothing_ran(store: Store, pause_id: str, status: str = "pending") -> None:
    record = store.pause(pause_id)
    assert record is not None and record.status == status
    task = store.task(record.task_id)
    assert task is not None and task.status == "needs_human" and task.used == record.used
    assert store.transitions(record.task_id) == [] and sent == []


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        ({"c1": "approve", "c9": "approve"}, "holds no pending call 'c9'"),
        ({"c9": "approve"}, "holds no pending call 'c9'"),
        ({}, "undecided calls: c1"),
        ({"c1": "yes"}, "neither 'approve' nor 'reject'"),
    ],
)
def test_decisions_that_do_not_fit_the_pause_are_refused_and_nothing_runs(
    store: Store, decisions: dict[str, str], message: str
) -> None:
    paused = pause(store)
    with pytest.raises(DecisionError, match=message):
        resume_guarded_sync(clerk(), paused.pause_id, store=store, who="ana", decisions=decisions)
    assert_nothing_ran(store, paused.pause_id)


def test_a_pause_without_decisions_is_not_resumed(store: Store) -> None:
    paused = pause(store)
    with pytest.raises(DecisionError, match="no recorded decisions: an operator approves it with `loopguard approve"):
        resume_guarded_sync(clerk(), paused.pause_id, store=store, who="worker")
    assert_nothing_ran(store, paused.pause_id)


def test_decisions_that_contradict_the_recorded_ones_are_refused(store: Store) -> None:
    paused = pause(store)
    decide(store, paused.pause_id, who="ana", reject_all=True)
    with pytest.raises(DecisionError, match="already decided by 'ana'"):
        resume_guarded_sync(clerk(), paused.pause_id, store=store, who="bo", decisions={"c1": "approve"})
    assert_nothing_ran(store, paused.pause_id, status="decided")


def test_a_decision_touches_only_its_own_task_and_pause(store: Store) -> None:
    mine = pause(store, "t-mine", call("refund", {"order": 5}, "c1"))
    other = pause(store, "t-other", call("refund", {"order": 6}, "c2"))
    with pytest.raises(ResumeError, match="belongs to task 't-other', not 't-mine'"):
        resume_guarded_sync(
            clerk(), other.pause_id, store=store, who="ana", task_id="t-mine", decisions={"c2": "approve"}
        )
    with pytest.raises(DecisionError, match="holds no pending call 'c1'"):  # my call's decision on the other pause
        resume_guarded_sync(clerk(), other.pause_id, store=store, who="ana", decisions={"c1": "approve"})
    with pytest.raises(ResumeError, match="unknown pause 'pause-nope'"):
        resume_guarded_sync(clerk(), "pause-nope", store=store, who="ana", decisions={"c1": "approve"})
    assert_nothing_ran(store, mine.pause_id)
    assert_nothing_ran(store, other.pause_id)


def test_a_pause_resumes_once(store: Store) -> None:
    paused = pause(store)
    decide(store, paused.pause_id, who="ana", approve_all=True)
    first = resume_guarded_sync(clerk([assistant_message("done")]), paused.pause_id, store=store, who="w1")
    with pytest.raises(PauseAlreadyResumed, match="already resumed by 'w1': a pause resumes at most once"):
        resume_guarded_sync(clerk([assistant_message("again")]), paused.pause_id, store=store, who="w2")
    assert sent == ["refund-5"] and len(store.transitions("t1")) == 1
    assert store.task("t1").used == first.used  # type: ignore[union-attr]


def test_a_resume_with_another_agent_graph_is_refused_before_the_claim(store: Store) -> None:
    paused = pause(store)
    decide(store, paused.pause_id, who="ana", approve_all=True)
    stranger = Agent(name="someone-else", model=ScriptedModel([]), tools=[refund])
    with pytest.raises(ResumeError, match="cannot be restored against agent 'someone-else'"):
        resume_guarded_sync(stranger, paused.pause_id, store=store, who="w1")
    assert_nothing_ran(store, paused.pause_id, status="decided")


def test_a_resumed_run_that_pauses_again_stores_a_new_pause_of_the_same_task(store: Store) -> None:
    paused = pause(store)
    again = resume_guarded_sync(
        clerk(call("refund", {"order": 6}, "c2")), paused.pause_id, store=store, who="w", decisions={"c1": "approve"}
    )
    assert (again.status, again.reason, again.used) == (Status.NEEDS_HUMAN, Reason.APPROVAL, Usage(2, 1))
    assert again.pause_id not in (None, paused.pause_id)
    first, second = store.pauses("t1")
    assert (first.status, second.status, second.task_id, second.used) == ("resumed", "pending", "t1", Usage(2, 1))
    assert [c["call_id"] for c in second.pending_calls] == ["c2"]


def test_the_stop_mark_set_during_a_pause_is_seen_by_the_resume(store: Store) -> None:
    paused = pause(store)
    decide(store, paused.pause_id, who="ana", approve_all=True)
    store.request_stop("t1", "operator: customer closed the account")
    resumed = resume_guarded_sync(clerk([assistant_message("x")]), paused.pause_id, store=store, who="w")
    assert (resumed.status, resumed.reason, sent) == (Status.STOPPED, Reason.STOP_REQUESTED, [])


def test_the_async_resume_continues_the_progress_rules_with_the_application_policy(store: Store) -> None:
    before = (call("lookup", {"n": 1}, "c0"), call("lookup", {"n": 1}, "c1"), call("refund", {"order": 5}, "c2"))
    # these verifies report the task's one revision (a page read; the refund's 1): Policy.task_revision
    paused = pause(store, "t1", *before, policy=Policy(task_revision=True))  # one stalled result before the pause

    async def scenario() -> Any:
        return await resume_guarded(
            clerk(call("lookup", {"n": 2}, "c3"), [assistant_message("x")]),
            paused.pause_id,
            store=store,
            who="w",
            decisions={"c2": "approve"},
            policy=Policy(max_stalled=2, task_revision=True),
        )

    resumed = asyncio.run(scenario())
    # the refund proves no new revision either: the second stalled result in a row, counted across the pause
    assert (resumed.status, resumed.reason, resumed.used) == (Status.STOPPED, Reason.NO_PROGRESS, Usage(3, 3))
    assert sent == ["refund-5"]


def test_resume_arguments_that_would_start_a_fresh_task_are_refused(store: Store) -> None:
    paused = pause(store)
    with pytest.raises(TypeError, match="continues the pause's own task and budget"):
        resume_guarded_sync(clerk(), paused.pause_id, store=store, who="w", budget=Budget(99, 99))
    assert_nothing_ran(store, paused.pause_id)


# --- tampering ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "old", "new"),
    [
        ("state", '{\\"order\\":5}', '{\\"order\\":8}'),  # the call the SDK would run
        ("pending_calls", "refund-order-5", "refund-order-8"),  # what the operator was shown and approved
        ("task_id", "t1", "t2"),  # moved to another task
    ],
)
def test_a_pause_altered_in_the_database_is_refused_and_nothing_runs(
    sql_url: str, column: str, old: str, new: str
) -> None:
    store = SQLStore(sql_url)
    store.ensure_task("t2", BUDGET)
    paused = pause(store)
    decide(store, paused.pause_id, who="ana", approve_all=True)
    engine = sa.create_engine(sql_url)
    with engine.begin() as conn:
        changed = conn.execute(
            sa.text(f"UPDATE loopguard_pauses SET {column} = REPLACE({column}, :old, :new) WHERE pause_id = :p"),
            {"old": old, "new": new, "p": paused.pause_id},
        )
        assert changed.rowcount == 1
    engine.dispose()
    assert old not in getattr(store.pause(paused.pause_id), column).__str__()
    with pytest.raises(PauseTampered, match="does not match its digest"):
        resume_guarded_sync(clerk([assistant_message("x")]), paused.pause_id, store=store, who="w")
    record = store.pause(paused.pause_id)
    assert record is not None and record.status == "decided" and sent == []
    assert store.transitions() == [] and store.task("t1").used == Usage(1, 0)  # type: ignore[union-attr]
    with pytest.raises(PauseTampered):  # the operator's command refuses it as well
        decide(store, paused.pause_id, who="bo", approve_all=True)
    store.close()


# --- reconciliation through the SDK flow --------------------------------------------------------------------


def lost_shipment(store: Store, task_id: str = "t-ship", budget: Budget = BUDGET) -> Any:
    lost_answers.append(True)
    outcome = run_guarded_sync(
        clerk(call("ship", {"order": 9}, "s1"), [assistant_message("booked?")]),
        "ship order 9",
        budget=budget,
        store=store,
        task_id=task_id,
    )
    assert (outcome.status, outcome.reason, outcome.operation_id) == (
        Status.NEEDS_RECONCILIATION,
        Reason.EXECUTOR_EXCEPTION,
        "ship-order-9",
    )
    assert outcome.record().allowed_next_actions == ["query_operation_status", "human_review"]
    assert sent == ["ship-9"]
    return outcome


def ship_again(store: Store, task_id: str = "t-ship") -> Any:
    return run_guarded_sync(
        clerk(call("ship", {"order": 9}, "s2"), [assistant_message("shipped")]),
        "ship order 9",
        budget=BUDGET,
        store=store,
        task_id=task_id,
    )


def test_a_lost_write_blocks_the_task_until_it_is_reconciled(store: Store) -> None:
    first = lost_shipment(store)
    again = run_guarded_sync(clerk(), "ship order 9", budget=BUDGET, store=store, task_id="t-ship")  # no model call
    assert (again.status, again.reason, again.used) == (first.status, first.reason, first.used)
    answer = reconcile(store, "ship-order-9", "unknown", who="ops", why="the carrier's API is down too")
    assert answer.blocked and answer.transition is None
    assert [str(a) for a in answer.allowed_next_actions] == ["query_operation_status", "human_review"]
    still = run_guarded_sync(clerk(), "ship order 9", budget=BUDGET, store=store, task_id="t-ship")
    assert still.status is Status.NEEDS_RECONCILIATION and sent == ["ship-9"]
    assert store.lookup_operation("ship-order-9").state is OperationState.UNKNOWN  # type: ignore[union-attr]


def test_a_write_reconciled_as_committed_returns_its_result_without_executing(store: Store) -> None:
    first = lost_shipment(store)
    answer = reconcile(
        store,
        "ship-order-9",
        "committed",
        who="ops",
        why="carrier says booking B-77 exists",
        result={"status": "ok", "output": "shipment 9 booked (B-77)"},
    )
    assert [str(a) for a in answer.allowed_next_actions] == ["return_result", "human_review"]
    assert answer.transition is not None and answer.transition.kind == "reconcile"
    assert (
        answer.transition.from_outcome is not None and answer.transition.from_outcome["reason"] == "executor_exception"
    )
    model_steps = [call("ship", {"order": 9}, "s2"), [assistant_message("shipped")]]
    model = ScriptedModel(model_steps)
    outcome = run_guarded_sync(
        Agent(name="clerk", model=model, tools=[ship]), "ship order 9", budget=BUDGET, store=store, task_id="t-ship"
    )
    assert sent == ["ship-9"]  # not sent again
    assert (outcome.status, outcome.reason, outcome.value) == (
        Status.COMPLETED,
        Reason.VALIDATED_DONE,
        "shipment 9 booked (B-77)",
    )
    outputs = told(model.last_call.input)
    assert outputs[-1] == "shipment 9 booked (B-77)"
    assert outcome.used == Usage(
        first.used.models + 2, first.used.tools
    )  # counters continued; a replay is no execution
    assert outcome.record().allowed_next_actions == ["return_result"]


def test_a_write_reconciled_as_not_committed_is_retried_within_the_remaining_budget(store: Store) -> None:
    first = lost_shipment(store)
    reconcile(store, "ship-order-9", "not_committed", who="ops", why="the carrier has no booking for order 9")
    outcome = ship_again(store)
    assert sent == ["ship-9", "ship-9"]  # the verified non-execution was sent once more
    assert (outcome.status, outcome.used.tools) == (Status.COMPLETED, first.used.tools + 1)
    assert store.lookup_operation("ship-order-9").state is OperationState.COMMITTED  # type: ignore[union-attr]


def test_a_retry_after_not_committed_still_needs_budget(store: Store) -> None:
    lost_shipment(store, budget=Budget(model_turns=6, tool_executions=1))
    reconcile(store, "ship-order-9", "not_committed", who="ops", why="no booking")
    outcome = ship_again(store)
    assert (outcome.status, outcome.reason, sent) == (Status.STOPPED, Reason.TOOL_BUDGET, ["ship-9"])
    assert outcome.record().allowed_next_actions == ["deliver_verified", "close"]


# --- explicit recovery through the SDK flow -----------------------------------------------------------------


def reading(*pages: int, prefix: str = "r") -> Agent[Any]:
    return clerk(*[call("lookup", {"n": n}, f"{prefix}{n}") for n in pages], [assistant_message("read")])


def test_a_stopped_task_is_recovered_by_a_recorded_decision_and_its_counters_continue(store: Store) -> None:
    budget = Budget(model_turns=2, tool_executions=10)
    guard = Guard(budget=budget, store=store, task_id="t-read")
    stopped = run_guarded_sync(reading(1, 2, 3, 4), "read", guard=guard)
    assert (stopped.status, stopped.reason, stopped.used) == (Status.STOPPED, Reason.MODEL_BUDGET, Usage(2, 2))
    assert stopped.record().allowed_next_actions == ["deliver_verified", "close"]
    with pytest.raises(RecoveryError, match="decide on its pause instead"):
        recover(store, pause(store, "t-paused").task_id, who="lead", why="more")

    transition = recover(
        store, "t-read", who="lead", why="pages 1-2 were new: two more turns", extend={"model_turns": 2}
    )
    assert (transition.kind, transition.budget_delta) == ("recover", {"model_turns": 2})
    assert transition.from_outcome is not None and transition.from_outcome["reason"] == "model_budget"

    # the finished guard stays finished: same outcome object, nothing runs (its model has no steps)
    assert run_guarded_sync(clerk(), "read", guard=guard) is stopped
    resumed = run_guarded_sync(reading(3, 4, 5, prefix="s"), "read", budget=budget, store=store, task_id="t-read")
    assert (resumed.status, resumed.reason) == (Status.STOPPED, Reason.MODEL_BUDGET)
    assert resumed.used == Usage(4, 4)  # 2 + 2 turns: continued, never from zero
    task = store.task("t-read")
    assert task is not None and task.budget.model_turns == 4 and task.revision == 4


def test_a_partial_task_is_recovered_and_goes_on_from_its_revision(store: Store) -> None:
    partial = run_guarded_sync(reading(1), "read", budget=BUDGET, store=store, task_id="t-partial")
    assert (partial.status, partial.reason, partial.revision) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL, 1)
    recover(store, "t-partial", who="lead", why="page 1 is verified; read page 2")
    done = run_guarded_sync(
        clerk(call("ship", {"order": 3}, "s3"), [assistant_message("shipped")]),
        "ship",
        budget=BUDGET,
        store=store,
        task_id="t-partial",
    )
    # the task's revision went on from 1: the shipment's own key advanced by 2 (its verify says 2)
    assert (done.status, done.used, done.revision) == (Status.COMPLETED, Usage(4, 2), 3)
    assert [t.kind for t in store.transitions("t-partial")] == ["recover"]


def test_a_pause_changed_between_the_checks_and_the_claim_is_refused() -> None:
    class SwappingStore(MemoryStore):
        """Alters the stored state right before the claim, as a concurrent writer could."""

        def claim_pause(self, pause_id: str, **kwargs: Any) -> Any:
            record = self._pauses[pause_id]
            self._pauses[pause_id] = dataclasses.replace(record, state=record.state.replace("5}", "8}"))
            return super().claim_pause(pause_id, **kwargs)

    store = SwappingStore()
    paused = pause(store)
    with pytest.raises(PauseTampered, match="changed while it was being resumed"):
        resume_guarded_sync(clerk(), paused.pause_id, store=store, who="w", decisions={"c1": "approve"})
    assert sent == []


@guarded_tool(needs_approval=True)
def call_partner(partner: str, api_key: str) -> str:
    """Call a partner's API."""
    return "called"


def test_the_pending_calls_shown_to_an_operator_are_redacted(store: Store) -> None:
    agent = Agent(
        name="clerk",
        model=ScriptedModel([call("call_partner", {"partner": "acme", "api_key": "sk-live-123456"}, "c1")]),
        tools=[call_partner],
    )
    outcome = run_guarded_sync(agent, "go", budget=BUDGET, store=store, task_id="t-secret")
    record = store.pause(outcome.pause_id or "")
    assert record is not None
    assert record.pending_calls[0]["arguments"] == '{"api_key":"[redacted]","partner":"acme"}'
    assert "sk-live-123456" in record.state  # the RunState is the conversation itself: it keeps what the model sent


def test_approving_the_same_write_again_and_again_sends_it_once_and_the_stall_rule_ends_it(store: Store) -> None:
    outcome, approvals = pause(store), 0
    while outcome.status is Status.NEEDS_HUMAN:
        decide(store, outcome.pause_id, who="ana", approve_all=True)
        approvals += 1
        again = clerk(call("refund", {"order": 5}, f"c{approvals + 1}"))  # the model asks for the same refund
        outcome = resume_guarded_sync(again, outcome.pause_id, store=store, who="w")
    assert (outcome.status, outcome.reason, approvals, sent) == (Status.STOPPED, Reason.NO_PROGRESS, 4, ["refund-5"])
    # the refund advanced the revision to 1; three replays in a row proved nothing new (Policy.max_stalled=3)
    assert outcome.used == Usage(models=4, tools=1)  # replays of the committed refund are not executions
