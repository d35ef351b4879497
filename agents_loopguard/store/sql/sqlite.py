"""Every store step as a transaction of the Core statements: how SQLite runs all of them.

A step decides with conditional statements and never with a read followed by a write; when a statement refuses,
the step reads the task row *in the same transaction* and lets the refusal rules (:mod:`..rules`) say why, then
rolls back. PostgreSQL runs the same transactions for its cold steps (:class:`~.postgres.PostgresSteps` inherits
them) and replaces the hot ones by one statement each.

Each step takes the cursor of the running step and the ``params`` its store method built (bind values named as
the statements name them); it raises :class:`~.connection.Rollback` to answer without its changes and
:class:`~.connection.LostRace` to run again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from ...values.errors import InputError
from ...values.outcome import Reason, Usage
from ..base import (
    MAX_CHAIN_WALK,
    Activation,
    Grant,
    OperationClaim,
    OperationRecord,
    OperationState,
    PauseRecord,
    Progress,
    Settlement,
    StopMark,
    TaskSnapshot,
    TransitionRecord,
    WriteReservation,
)
from ..rules import (
    check_answer,
    check_claim,
    check_decide,
    check_reconcile,
    check_recover,
    cost_refusal,
    execution_refusal,
    reopens,
    token_refusal,
    turn_refusal,
    unknown_task,
)
from .connection import LostRace, Rollback
from .statements import Statements, execute, fetch_one
from .tables import (
    activation,
    budget,
    budget_params,
    encode,
    loads,
    operation,
    pause,
    snapshot,
    task_state,
    transition_params,
    usage,
)

__all__ = ["SQLiteSteps"]


class SQLiteSteps:
    """The store's steps, each one transaction of :class:`~.statements.Statements`."""

    def __init__(self, statements: Statements) -> None:
        self.st = statements

    def get_task(self, cur: Any, task_id: str) -> Any:
        row = fetch_one(cur, self.st.task, {"task_id": task_id})
        if row is None:
            raise unknown_task(task_id)
        return row

    def _before_own_increment(self, cur: Any, task_id: str) -> dict[str, Any]:
        """The task row as it was before this transaction counted one execution (about to be rolled back)."""
        task = dict(self.get_task(cur, task_id))
        task["tools"] -= 1
        return task

    def execution_refusal(
        self, cur: Any, task: Any, params: dict[str, Any], *, poll: bool = False, own_repeat: int = 0
    ) -> Grant:
        """Why the execution was refused, read from ``task``, its repetition row and its tool's count (else: the step
        lost a race). ``own_repeat``: this transaction already counted the repetition (about to be rolled back)."""
        rep = fetch_one(cur, self.st.repeat_get, {**params, "revision": task["revision"]})
        count, first_at = (int(rep["count"]) - own_repeat, rep["first_at"]) if rep is not None else (0, None)
        limit: tuple[str, int] | None = None
        runs = 0
        if params.get("tool_max") is not None:
            limit = (params["limit_tool"], params["tool_max"])
            row = fetch_one(cur, self.st.tool_runs_get, params)
            runs = int(row["count"]) if row is not None else 0
        return self.explained(
            execution_refusal(
                task_state(task),
                count,
                first_at,
                max_repeats=params["max_repeats"],
                now=params["now"],
                poll=poll,
                max_wait=params.get("max_wait"),
                tool_limit=limit,
                tool_runs=runs,
            )
        )

    def _count_tool(self, cur: Any, params: dict[str, Any], *, poll: bool = False) -> Grant | None:
        """Count the execution against its tool's limit (when the reservation names one), after the execution and
        its repetition were counted in this transaction; the refusal if the tool ran its maximum."""
        if params.get("tool_max") is None:
            return None
        if params["tool_max"] >= 1 and fetch_one(cur, self.st.tool_run, params) is not None:
            return None
        task = self._before_own_increment(cur, params["task_id"])
        return self.execution_refusal(cur, task, params, poll=poll, own_repeat=1)

    @staticmethod
    def explained(refusal: Grant | None) -> Grant:
        """The refusal the rules found; none means the statement lost a race to a concurrent step: run it again."""
        if refusal is None:
            raise LostRace
        return refusal

    # --- tasks and counters -------------------------------------------------------------------------------------------

    def ensure_task(self, cur: Any, params: dict[str, Any]) -> tuple[TaskSnapshot, bool]:
        """The task, and whether this step created it."""
        execute(cur, self.st.task_insert, params)
        created = cur.rowcount == 1
        task = snapshot(self.get_task(cur, params["task_id"]))
        return self.picked_up(cur, task), created

    def picked_up(self, cur: Any, task: TaskSnapshot) -> TaskSnapshot:
        """A reopened task that a run's guard opens runs again: it is ``running`` in every view from now on."""
        if task.reopened:
            execute(cur, self.st.pick_up, {"task_id": task.task_id})
            task = replace(task, reopened=False)
        return task

    def reserve_turn(self, cur: Any, params: dict[str, Any]) -> Grant:
        task_id, now = params["task_id"], params["now"]
        row = fetch_one(cur, self.st.turn, params)
        if row is None:
            raise Rollback(self.explained(turn_refusal(task_state(self.get_task(cur, task_id)))))
        used = usage(row)
        execute(
            cur,
            self.st.trace_insert,
            {
                "task_id": task_id,
                "seq": row["trace_seq"],
                "kind": "model",
                "tool": None,
                "args": None,
                "result_class": "reserved",
                "e_revision": row["revision"],
                "e_models": used.models,
                "e_tools": used.tools,
                "fingerprint": None,
                "operation_id": None,
                "operation_state": None,
                "at": now,
            },
        )
        return Grant(True, None, used, int(row["revision"]), stalled=int(row["stalled"]))

    def reserve_execution(self, cur: Any, params: dict[str, Any], *, poll: bool) -> Grant:
        task_id = params["task_id"]
        if params["max_repeats"] < 1:
            raise Rollback(self.execution_refusal(cur, self.get_task(cur, task_id), params, poll=poll))
        row = fetch_one(cur, self.st.execution, params)
        if row is None:
            raise Rollback(self.execution_refusal(cur, self.get_task(cur, task_id), params, poll=poll))
        stmt = self.st.repeat_wait if params["max_wait"] is not None else self.st.repeat
        if fetch_one(cur, stmt, {**params, "revision": row["revision"]}) is None:
            raise Rollback(self.execution_refusal(cur, self._before_own_increment(cur, task_id), params, poll=poll))
        refused = self._count_tool(cur, params, poll=poll)
        if refused is not None:
            raise Rollback(refused)
        return Grant(True, None, usage(row), int(row["revision"]), stalled=int(row["stalled"]))

    def reserve_write(self, cur: Any, params: dict[str, Any]) -> WriteReservation:
        task_id = params["task_id"]
        # The operation first, by its primary key: a new id is inserted as unknown (rolled back if refused).
        claimed = fetch_one(cur, self.st.op_insert, params)
        if claimed is None:
            claimed = fetch_one(cur, self.st.op_reopen, params)  # a verified non-execution, same payload
            if claimed is None:
                existing = fetch_one(cur, self.st.op, params)
                if existing is None:
                    raise LostRace
                raise Rollback(WriteReservation(None, OperationClaim(False, operation(existing))))
        if params["max_repeats"] < 1:
            raise Rollback(WriteReservation(self.execution_refusal(cur, self.get_task(cur, task_id), params), None))
        row = fetch_one(cur, self.st.execution, params)
        if row is None:
            raise Rollback(WriteReservation(self.execution_refusal(cur, self.get_task(cur, task_id), params), None))
        if fetch_one(cur, self.st.repeat, {**params, "revision": row["revision"]}) is None:
            task = self._before_own_increment(cur, task_id)
            raise Rollback(WriteReservation(self.execution_refusal(cur, task, params), None))
        refused = self._count_tool(cur, params)
        if refused is not None:
            raise Rollback(WriteReservation(refused, None))
        grant = Grant(True, None, usage(row), int(row["revision"]), stalled=int(row["stalled"]))
        return WriteReservation(grant, OperationClaim(True, operation(claimed)))

    def reserve_cost(self, cur: Any, params: dict[str, Any]) -> Grant:
        row = fetch_one(cur, self.st.cost, params)
        if row is not None:
            return Grant(True, None, usage(row), int(row["revision"]))
        return self.explained(cost_refusal(task_state(self.get_task(cur, params["task_id"])), params["amount"]))

    def settle_cost(self, cur: Any, params: dict[str, Any]) -> Usage:
        row = fetch_one(cur, self.st.settle, params)
        if row is None:
            raise unknown_task(params["task_id"])
        return usage(row)

    def reserve_tokens(self, cur: Any, params: dict[str, Any]) -> Grant:
        row = fetch_one(cur, self.st.tokens, params)
        if row is not None:
            return Grant(True, None, usage(row), int(row["revision"]))
        task = task_state(self.get_task(cur, params["task_id"]))
        return self.explained(token_refusal(task, params["in"], params["out"]))

    def settle_tokens(self, cur: Any, params: dict[str, Any]) -> Usage:
        row = fetch_one(cur, self.st.settle_tokens, params)
        if row is None:
            raise unknown_task(params["task_id"])
        return usage(row)

    # --- the operation ledger -----------------------------------------------------------------------------------------

    def reserve_operation(self, cur: Any, params: dict[str, Any]) -> OperationClaim:
        row = fetch_one(cur, self.st.op_insert, params)
        if row is None:
            row = fetch_one(cur, self.st.op_reopen, params)
        if row is not None:
            return OperationClaim(True, operation(row))
        existing = fetch_one(cur, self.st.op, params)
        if existing is None:
            raise LostRace
        return OperationClaim(False, operation(existing))

    def reconcile_operation(self, cur: Any, params: dict[str, Any]) -> OperationRecord:
        operation_id, state = params["operation_id"], OperationState(params["state"])
        if state is not OperationState.UNKNOWN:
            row = fetch_one(cur, self.st.op_reconcile, params)
            if row is not None:
                return operation(row)
        old = fetch_one(cur, self.st.op, params)
        record = check_reconcile(operation_id, operation(old) if old is not None else None)
        if state is OperationState.UNKNOWN:
            return record
        raise LostRace

    def settle_operation(self, cur: Any, params: dict[str, Any], *, who: str, why: str, kind: str) -> Settlement:
        operation_id, now = params["operation_id"], params["now"]
        old = fetch_one(cur, self.st.op, params)
        record = check_answer(operation_id, operation(old) if old is not None else None, params["expected"])
        if params["state"] != params["expected"]:
            row = fetch_one(cur, self.st.op_answer, params)
            if row is None:
                raise LostRace  # changed since the read (cannot happen under the write lock)
            record = operation(row)
        task = self.get_task(cur, record.task_id)
        unknown_left = fetch_one(cur, self.st.unknown_of_task, {"task_id": record.task_id}) is not None
        transition = TransitionRecord.new(
            record.task_id, kind, who, why, now, from_outcome=loads(task["outcome"]), operation_id=operation_id
        )
        execute(cur, self.st.transition_insert, transition_params(transition))
        reopened = reopens(task["status"], unknown_left)
        if reopened:
            execute(cur, self.st.reopen, {"task_id": record.task_id, "now": now})
        return Settlement(record, transition, reopened)

    # --- results and progress -----------------------------------------------------------------------------------------

    def record_execution(self, cur: Any, params: dict[str, Any], *, mode: str, seen: Sequence[str]) -> Progress:
        task_id = params["task_id"]
        row = fetch_one(cur, self.st.progress[mode], params)
        if row is None:
            raise unknown_task(task_id)
        execute(cur, self.st.trace_insert, {**params, "seq": row["trace_seq"]})
        if "op_id" in params:
            execute(cur, self.st.op_settle, params)
        fresh = {k for k in params["keys"] if fetch_one(cur, self.st.seen, {"task_id": task_id, "key": k}) is not None}
        return Progress(int(row["revision"]), int(row["stalled"]), tuple(k not in fresh for k in seen), usage(row))

    def append_trace(self, cur: Any, params: dict[str, Any]) -> None:
        row = fetch_one(cur, self.st.trace_seq, params)
        if row is None:
            raise unknown_task(params["task_id"])
        execute(cur, self.st.trace_insert, {**params, "seq": row["trace_seq"]})

    def deferred_trace(self, cur: Any, params: dict[str, Any]) -> None:
        """A trace row written in the next write step's transaction (see ``Database.defer``)."""
        self.append_trace(cur, params)

    def deferred_record(self, cur: Any, params: dict[str, Any], *, mode: str) -> None:
        """A read's result (trace row and progress) written in the next write step's transaction."""
        self.record_execution(cur, params, mode=mode, seen=())

    # --- stop mark and terminal outcome -------------------------------------------------------------------------------

    def set_stop_mark(self, cur: Any, params: dict[str, Any], who: str | None) -> StopMark:
        row = fetch_one(cur, self.st.stop, params)
        if row is None:  # unknown, or marked already (the first mark wins)
            return StopMark(snapshot(self.get_task(cur, params["task_id"])), False)
        task = snapshot(row)
        if who is not None:
            stop = TransitionRecord.new(
                params["task_id"], "stop", who, params["reason"], params["now"], from_outcome=task.outcome
            )
            execute(cur, self.st.transition_insert, transition_params(stop))
        return StopMark(task, True)

    def finish(self, cur: Any, params: dict[str, Any]) -> dict[str, Any]:
        row = fetch_one(cur, self.st.finish, params)
        stored = row["outcome"] if row is not None else self.get_task(cur, params["task_id"])["outcome"]
        return cast(dict[str, Any], loads(stored))

    # --- workflow re-entry --------------------------------------------------------------------------------------------

    def activate(self, cur: Any, params: dict[str, Any], *, max_depth: int) -> Activation:
        st, flow, activation_id = self.st, params["flow"], params["activation_id"]
        seen = fetch_one(cur, st.activation, params)
        if seen is not None:
            return activation(seen, duplicate=True)
        chain_id, depth = activation_id, 0
        origin = params["origin"]
        node = fetch_one(cur, st.parent, {"origin": origin}) if origin else None
        if node is not None:
            chain_id = node["chain_id"]
        for _ in range(MAX_CHAIN_WALK):  # the chain's ancestry: earlier activations of this flow are re-entries
            if node is None:
                break
            depth += node["flow"] == flow
            origin = node["origin_operation_id"]
            node = fetch_one(cur, st.parent, {"origin": origin}) if origin else None
        granted = depth <= max_depth
        row = fetch_one(
            cur,
            st.activation_insert,
            {
                **params,
                "chain_id": chain_id,
                "depth": depth,
                "granted": granted,
                "reason": None if granted else str(Reason.TRIGGER_CHAIN),
            },
        )
        if row is None:
            raise LostRace  # delivered twice at once: the other insert won; read it as a duplicate
        return activation(row)

    # --- approval pauses and transitions ------------------------------------------------------------------------------

    def save_pause(self, cur: Any, params: dict[str, Any]) -> PauseRecord:
        row = fetch_one(cur, self.st.pause_insert, params)
        if row is None:
            self.get_task(cur, params["task_id"])
            raise InputError(f"pause {params['pause_id']!r} already exists")
        execute(cur, self.st.outcome, params)
        return pause(row)

    def decide_pause(self, cur: Any, params: dict[str, Any]) -> PauseRecord:
        row = fetch_one(cur, self.st.pause_decide, params)
        if row is not None:
            return pause(row)
        old = fetch_one(cur, self.st.pause, params)
        check_decide(params["pause_id"], pause(old) if old is not None else None)
        raise LostRace  # pending after all: the decision statement lost a race (cannot happen under the write lock)

    def claim_pause(
        self, cur: Any, pause_id: str, *, who: str, decisions: dict[str, str] | None, why: str, now: float
    ) -> tuple[PauseRecord, TransitionRecord]:
        old = fetch_one(cur, self.st.pause, {"pause_id": pause_id})
        record = check_claim(pause_id, pause(old) if old is not None else None, decisions=decisions is not None)
        applied = dict(record.decisions) if decisions is None else dict(decisions)
        task = self.get_task(cur, record.task_id)
        claim = {"pause_id": pause_id, "who": who, "now": now, "decisions": encode(applied)}
        row = fetch_one(cur, self.st.pause_claim, claim)
        if row is None:
            raise LostRace  # another claimer won since our read (cannot happen under the write lock)
        transition = TransitionRecord.new(
            record.task_id,
            "resume",
            who,
            why,
            now,
            pause_id=pause_id,
            from_outcome=loads(task["outcome"]),
            decisions=applied,
        )
        execute(cur, self.st.transition_insert, transition_params(transition))
        execute(cur, self.st.reopen, {"task_id": record.task_id, "now": now})
        return pause(row), transition

    def label_task(self, cur: Any, transition: TransitionRecord) -> TransitionRecord:
        self.get_task(cur, transition.task_id)  # an unknown task is refused
        execute(cur, self.st.transition_insert, transition_params(transition))
        return transition

    def recover(
        self, cur: Any, task_id: str, *, who: str, why: str, kind: str, delta: dict[str, Any], now: float
    ) -> TransitionRecord:
        task = self.get_task(cur, task_id)
        check_recover(task_id, task_state(task), kind)
        extended = budget(task).extended(delta)
        transition = TransitionRecord.new(
            task_id, kind, who, why, now, from_outcome=loads(task["outcome"]), budget_delta=delta
        )
        execute(cur, self.st.transition_insert, transition_params(transition))
        execute(
            cur,
            self.st.recover,
            {"task_id": task_id, **budget_params(extended), "clear_stop": kind == "recover", "now": now},
        )
        return transition
