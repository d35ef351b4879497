"""R17 below any engine: the store's record of a durable engine's steps, and the guarded run's rule on it, with a
``DurableSteps`` that names the steps as an engine does (the real DBOS, with killed processes, is in
tests/test_durable_dbos.py). Every store backend."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents_loopguard import Budget, Reason, RunOptions, Status
from agents_loopguard.run import Execute, Executed, GuardedRun, ToolSpec, drive, perform_check
from agents_loopguard.run.durable import recorded, replayed
from agents_loopguard.store import Store
from agents_loopguard.values.errors import NotFoundError, StoreError


def test_r17_a_step_begins_once_counts_re_executions_and_keeps_its_first_output(store: Store) -> None:
    """Rules: R17 (durable replays count once)."""
    store.ensure_task("t", Budget(model_turns=3, tool_executions=3))
    first = store.begin_step("t", "wf:step:1")
    assert (first.attempts, first.done, first.output) == (1, False, None)
    assert store.begin_step("t", "wf:step:1").attempts == 2  # its worker died: executed again
    ended = store.end_step("t", "wf:step:1", {"output": "sent"})
    assert ended.done and ended.output == {"output": "sent"} and ended.attempts == 2
    again = store.begin_step("t", "wf:step:1")  # a replay: the record, unchanged
    assert (again.attempts, again.done, again.output) == (2, True, {"output": "sent"})
    assert store.end_step("t", "wf:step:1", {"output": "other"}).output == {"output": "sent"}
    with pytest.raises(NotFoundError, match="no step 'never' began"):
        store.end_step("t", "never", None)
    with pytest.raises(NotFoundError, match="unknown task"):
        store.begin_step("missing", "wf:step:1")


class Workflow:
    """Names steps as a durable engine does: the workflow's id, a model call's position, the tool-call id."""

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id, self.calls = workflow_id, 0

    def model_step(self) -> str | None:
        self.calls += 1
        return f"{self.workflow_id}:step:{self.calls}"

    def tool_step(self, call_id: str | None) -> str | None:
        return f"{self.workflow_id}:tool:{call_id}" if call_id else None


def _verified(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": 1, "done": True, "effect": "committed"}


REFUND = ToolSpec(kind="write", operation_id=lambda args: f"refund-{args['order']}", verify=_verified)


def _worker(store: Store, workflow: Workflow, bodies: list[str]) -> Any:
    """One worker's run of the workflow: a guarded run of the task, and its refund executed (the body appends)."""
    run = GuardedRun.start(
        RunOptions(budget=Budget(model_turns=4, tool_executions=4), store=store, task_id="t-replay", durable=workflow)
    )

    def perform(effect: Any) -> Any:
        if isinstance(effect, Execute):
            bodies.append(f"refund-{effect.call.args['order']}")
            return f"refunded {effect.call.args['order']}"
        return perform_check(effect)

    call = run.propose(REFUND, "refund", '{"order": 7}', "call-1")
    assert not isinstance(call, Executed)
    return run, drive(run.execute(REFUND, call), perform)


def test_r17_a_replayed_execution_runs_no_body_counts_nothing_and_keeps_the_run_done(store: Store) -> None:
    """Rules: R17, R10 (a write runs once), R12. A worker ran the refund, then died; the engine replays the
    workflow in another worker (a new guarded run of the same task): the same call answers from the step's record,
    with no body and nothing counted, and the run is done as the first one was (no work remains)."""
    bodies: list[str] = []
    first, executed = _worker(store, Workflow("wf-1"), bodies)
    assert executed.output == "refunded 7" and first.done is not None and bodies == ["refund-7"]
    used = store.task("t-replay").used  # type: ignore[union-attr]
    again, replay = _worker(store, Workflow("wf-1"), bodies)
    assert replay.output == "refunded 7" and bodies == ["refund-7"]
    assert store.task("t-replay").used == used  # type: ignore[union-attr]
    assert again.done is not None and again.no_work_remains() and again.tool_choice("required") == "none"
    _worker(store, Workflow("wf-2"), bodies)  # another workflow: not a replay; the ledger still holds
    assert bodies == ["refund-7"] and store.task("t-replay").used.tools == used.tools  # type: ignore[union-attr]


def test_r17_a_re_executed_write_is_never_sent_again(store: Store) -> None:
    """Rules: R17, R6 (unknown blocks a resend). The worker died inside the refund (the step began, never ended):
    the engine's re-execution is refused as unknown_commit, and the body does not run again."""
    workflow = Workflow("wf-3")
    dying = GuardedRun.start(RunOptions(budget=Budget(4, 4), store=store, task_id="t-replay", durable=workflow))
    call = dying.propose(REFUND, "refund", '{"order": 9}', "call-9")
    assert not isinstance(call, Executed)
    effects = dying.execute(REFUND, call)
    assert isinstance(next(effects), Execute)  # reserved, the body about to run: the worker dies here
    bodies: list[str] = []
    recovered = GuardedRun.start(RunOptions(budget=Budget(4, 4), store=store, task_id="t-replay", durable=workflow))
    call = recovered.propose(REFUND, "refund", '{"order": 9}', "call-9")
    assert not isinstance(call, Executed)
    result = drive(recovered.execute(REFUND, call), lambda effect: bodies.append("ran"))
    assert bodies == [] and result.verdict is not None and result.verdict.reason is Reason.UNKNOWN_COMMIT
    step = store.begin_step("t-replay", "wf-3:tool:call-9")  # began twice; the refusal is what a replay reads
    assert step.attempts == 2 and step.done and "needs_reconciliation" in step.output["message"]


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.text(), st.lists(st.integers()), st.dictionaries(st.text(), st.text())))
def test_r17_a_damaged_step_record_is_a_store_error_never_a_crash(record: Any) -> None:
    """Rules: R17. Whatever a tampered store holds as a step's record is refused with one clear error."""
    with pytest.raises(StoreError, match="damaged record of a durable step"):
        replayed(record)


def test_r17_a_record_round_trips_its_verdicts() -> None:
    """Rules: R17."""
    from agents_loopguard.values.calls import Verdict

    done = Verdict(Status.COMPLETED, Reason.VALIDATED_DONE, "done", value={"status": "ok", "output": 1})
    refusal = Verdict(Status.STOPPED, Reason.SAME_CALL, "again", "op-1")
    output, message, verdict, ended, proved = replayed(recorded("x", "refused", refusal, True, done))
    assert (output, message, verdict, ended, proved) == ("x", "refused", refusal, True, done)


def test_r17_an_agent_a_durable_engine_wrapped_first_is_refused_with_the_adapter_to_use() -> None:
    """Rules: R17. The SDK's attach idiom handed DBOS's own ``DBOSRunner.run`` would put DBOS's tool turnstile
    outside the guard and leave replays unrecognised: the run is refused before any model call, naming
    ``run_guarded_dbos``, and the task ends stopped/fatal."""
    import asyncio

    from agents import Agent, set_tracing_disabled
    from agents.exceptions import UserError
    from agents.testing import ScriptedModel, assistant_message
    from dbos_openai_agents import DBOSRunner

    from agents_loopguard import MemoryStore
    from agents_loopguard.sdk import LoopGuard

    set_tracing_disabled(True)
    store = MemoryStore()
    model = ScriptedModel([[assistant_message("hi")]])

    async def main() -> None:
        guard = LoopGuard("hi", budget=Budget(3, 3), store=store, task_id="t-attached")
        agent = Agent(name="a", model=model)
        try:
            result: Any = await DBOSRunner.run(agent, guard.input, hooks=guard.hooks(), run_config=guard.run_config())
        except Exception as exc:
            result = exc
        await guard.outcome(result)

    with pytest.raises(UserError, match="run_guarded_dbos"):
        asyncio.run(main())
    task = store.task("t-attached")
    assert task is not None and task.used.models == 0 and task.outcome["status"] == "stopped"
