"""An in-process store for tests and single scripts. Atomic under one lock; gone when the process ends."""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..budget import Budget
from ..outcome import Reason, Usage
from .base import (
    MAX_CHAIN_WALK,
    Activation,
    Grant,
    InputError,
    NotFoundError,
    OperationClaim,
    OperationRecord,
    OperationState,
    PauseAlreadyResumed,
    PauseRecord,
    Progress,
    StateError,
    StopMark,
    Store,
    TaskSnapshot,
    TraceEntry,
    TransitionRecord,
    WriteReservation,
)

__all__ = ["MemoryStore"]


@dataclass
class _Task:
    task_id: str
    budget: Budget
    revision: int
    created_at: float
    models: int = 0
    tools: int = 0
    cost: float = 0.0
    stalled: int = 0
    status: str = "running"
    stop_reason: str | None = None
    outcome: dict[str, Any] | None = None
    updated_at: float = 0.0
    repeats: dict[str, list[float]] = field(default_factory=dict)  # key -> [count, first_at]
    seen: set[str] = field(default_factory=set)
    trace: list[TraceEntry] = field(default_factory=list)

    def usage(self) -> Usage:
        return Usage(self.models, self.tools, self.cost)

    def snapshot(self) -> TaskSnapshot:
        return TaskSnapshot(
            task_id=self.task_id,
            budget=self.budget,
            used=self.usage(),
            revision=self.revision,
            stalled=self.stalled,
            status=self.status,
            stop_reason=self.stop_reason,
            outcome=copy.deepcopy(self.outcome),
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def blocked(self) -> Grant | None:
        if self.stop_reason is not None or self.status != "running":
            detail = f"stop mark: {self.stop_reason}" if self.stop_reason else f"task already {self.status}"
            return Grant(False, Reason.STOP_REQUESTED, self.usage(), self.revision, detail)
        return None


class MemoryStore(Store):
    """A :class:`~agents_loopguard.store.base.Store` in a dict, for one process.

    >>> from agents_loopguard import Budget
    >>> store = MemoryStore()
    >>> _ = store.ensure_task("t1", Budget(model_turns=1, tool_executions=1))
    >>> store.reserve_turn("t1").granted, store.reserve_turn("t1").reason
    (True, <Reason.MODEL_BUDGET: 'model_budget'>)
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tasks: dict[str, _Task] = {}
        self._operations: dict[str, OperationRecord] = {}
        self._activations: dict[str, Activation] = {}
        self._pauses: dict[str, PauseRecord] = {}
        self._transitions: list[TransitionRecord] = []

    def _task(self, task_id: str) -> _Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first") from None

    # tasks and counters

    def ensure_task(self, task_id: str, budget: Budget, *, revision: int = 0, now: float = 0.0) -> TaskSnapshot:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                task = self._tasks[task_id] = _Task(task_id, budget, revision, created_at=now, updated_at=now)
            return task.snapshot()

    def task(self, task_id: str) -> TaskSnapshot | None:
        with self._lock:
            task = self._tasks.get(task_id)
            return task.snapshot() if task else None

    def tasks(self) -> list[TaskSnapshot]:
        with self._lock:
            return [t.snapshot() for t in self._tasks.values()]

    def reserve_turn(self, task_id: str, *, now: float = 0.0) -> Grant:
        with self._lock:
            task = self._task(task_id)
            refusal = task.blocked()
            if refusal:
                return refusal
            if task.models >= task.budget.model_turns:
                return Grant(False, Reason.MODEL_BUDGET, task.usage(), task.revision)
            task.models += 1
            task.updated_at = now
            task.trace.append(
                TraceEntry(
                    kind="model",
                    result_class="reserved",
                    revision=task.revision,
                    models=task.models,
                    tools=task.tools,
                    at=now,
                )
            )
            return Grant(True, None, task.usage(), task.revision)

    def reserve_execution(
        self,
        task_id: str,
        fingerprint: str,
        *,
        max_repeats: int,
        now: float = 0.0,
        max_wait: float | None = None,
        poll: bool = False,
    ) -> Grant:
        with self._lock:
            task = self._task(task_id)
            refusal = task.blocked()
            if refusal:
                return refusal
            key = f"{fingerprint}@{task.revision}"
            count, first_at = task.repeats.get(key, (0, now))
            if count >= max_repeats:
                return Grant(False, Reason.WAIT_BUDGET if poll else Reason.SAME_CALL, task.usage(), task.revision)
            if poll and max_wait is not None and count and now - first_at >= max_wait:
                return Grant(False, Reason.WAIT_BUDGET, task.usage(), task.revision, "waited past max_wait")
            if task.tools >= task.budget.tool_executions:
                return Grant(False, Reason.TOOL_BUDGET, task.usage(), task.revision)
            task.repeats[key] = [count + 1, first_at]
            task.tools += 1
            task.updated_at = now
            return Grant(True, None, task.usage(), task.revision)

    def reserve_cost(self, task_id: str, amount: float) -> Grant:
        with self._lock:
            task = self._task(task_id)
            refusal = task.blocked()
            if refusal:
                return refusal
            limit = task.budget.cost
            if limit is not None and task.cost + amount > limit:
                return Grant(False, Reason.COST_BUDGET, task.usage(), task.revision)
            task.cost += amount
            return Grant(True, None, task.usage(), task.revision)

    def settle_cost(self, task_id: str, reserved: float, actual: float) -> Usage:
        with self._lock:
            task = self._task(task_id)
            task.cost = max(0.0, task.cost - reserved + actual)
            return task.usage()

    # the operation ledger

    def lookup_operation(self, operation_id: str) -> OperationRecord | None:
        with self._lock:
            return self._operations.get(operation_id)

    def reserve_operation(
        self, task_id: str, operation_id: str, payload: str, tool: str, *, now: float = 0.0
    ) -> OperationClaim:
        with self._lock:
            old = self._operations.get(operation_id)
            if old is None:
                record = OperationRecord(
                    operation_id, task_id, tool, payload, OperationState.UNKNOWN, None, 1, now, now
                )
                self._operations[operation_id] = record
                return OperationClaim(True, record)
            if old.state is OperationState.NOT_COMMITTED and old.payload == payload:
                record = replace(
                    old, state=OperationState.UNKNOWN, result=None, attempts=old.attempts + 1, updated_at=now
                )
                self._operations[operation_id] = record
                return OperationClaim(True, record)
            return OperationClaim(False, old)

    def reserve_write(
        self,
        task_id: str,
        operation_id: str,
        fingerprint: str,
        tool: str,
        *,
        max_repeats: int,
        now: float = 0.0,
    ) -> WriteReservation:
        with self._lock:  # the base class's three steps under one lock: atomic for this process's threads
            return super().reserve_write(task_id, operation_id, fingerprint, tool, max_repeats=max_repeats, now=now)

    def operations(self, task_id: str | None = None) -> list[OperationRecord]:
        with self._lock:
            return [r for r in self._operations.values() if task_id is None or r.task_id == task_id]

    def reconcile_operation(
        self, operation_id: str, state: OperationState, result: Any = None, *, now: float = 0.0
    ) -> OperationRecord:
        state = OperationState(state)
        with self._lock:
            old = self._operations.get(operation_id)
            if old is None:
                raise NotFoundError(f"unknown operation {operation_id!r}")
            if old.state is not OperationState.UNKNOWN:
                raise StateError(f"operation {operation_id!r} is {old.state}, not unknown: nothing to reconcile")
            if state is OperationState.UNKNOWN:
                return old
            record = replace(old, state=state, result=copy.deepcopy(result), updated_at=now)
            self._operations[operation_id] = record
            return record

    # results and progress

    def record_execution(
        self,
        task_id: str,
        entry: TraceEntry,
        *,
        revision: int | None,
        pending: bool = False,
        operation: tuple[str, OperationState, Any] | None = None,
        seen: Sequence[str] = (),
    ) -> Progress:
        with self._lock:
            task = self._task(task_id)
            if operation is not None:
                op_id, state, result = operation
                old = self._operations.get(op_id)
                if old is not None:
                    self._operations[op_id] = replace(
                        old, state=OperationState(state), result=copy.deepcopy(result), updated_at=entry.at
                    )
            if revision is not None:
                if revision > task.revision:
                    task.revision, task.stalled = revision, 0
                elif not pending:
                    task.stalled += 1
            seen_before = tuple(key in task.seen for key in seen)
            task.seen.update(seen)
            task.trace.append(entry)
            task.updated_at = entry.at
            return Progress(task.revision, task.stalled, seen_before, task.usage())

    def append_trace(self, task_id: str, entry: TraceEntry) -> None:
        with self._lock:
            task = self._task(task_id)
            task.trace.append(entry)

    def trace(self, task_id: str) -> list[TraceEntry]:
        with self._lock:
            return [replace(entry, seq=seq) for seq, entry in enumerate(self._task(task_id).trace, 1)]

    # stop mark and terminal outcome

    def set_stop_mark(
        self, task_id: str, reason: str = "stop_requested", *, who: str | None = None, now: float = 0.0
    ) -> StopMark:
        with self._lock:
            task = self._task(task_id)
            if task.stop_reason is not None:
                return StopMark(task.snapshot(), False)
            task.stop_reason = reason or "stop_requested"
            task.updated_at = now
            snapshot = task.snapshot()
            if who is not None:
                stop = TransitionRecord(f"tr-{uuid.uuid4().hex[:12]}", task_id, "stop", who, task.stop_reason, now)
                self._transitions.append(replace(stop, from_outcome=copy.deepcopy(snapshot.outcome)))
            return StopMark(snapshot, True)

    def finish(self, task_id: str, record: dict[str, Any], *, now: float = 0.0) -> dict[str, Any]:
        with self._lock:
            task = self._task(task_id)
            if task.outcome is None:
                task.outcome = copy.deepcopy(record)
                task.status = str(record.get("status", "stopped"))
                task.updated_at = now
            return copy.deepcopy(task.outcome)

    # workflow re-entry

    def activate(
        self,
        flow: str,
        activation_id: str,
        *,
        origin_operation_id: str | None,
        max_depth: int,
        now: float = 0.0,
    ) -> Activation:
        with self._lock:
            seen = self._activations.get(activation_id)
            if seen is not None:
                return replace(seen, duplicate=True)
            chain_id, depth = activation_id, 0
            node = self._activation_that_wrote(origin_operation_id)
            if node is not None:
                chain_id = node.chain_id
            for _ in range(MAX_CHAIN_WALK):  # the chain's ancestry: earlier activations of this flow are re-entries
                if node is None:
                    break
                depth += node.flow == flow
                node = self._activation_that_wrote(node.origin_operation_id)
            granted = depth <= max_depth
            record = Activation(
                granted,
                activation_id,
                flow,
                chain_id,
                depth,
                origin_operation_id,
                None if granted else Reason.TRIGGER_CHAIN,
            )
            self._activations[activation_id] = record
            return record

    def _activation_that_wrote(self, operation_id: str | None) -> Activation | None:
        """The activation whose run wrote ``operation_id`` (its task id is the activation id), if any."""
        origin = self._operations.get(operation_id) if operation_id else None
        return self._activations.get(origin.task_id) if origin is not None else None

    def activations(self, flow: str | None = None) -> list[Activation]:
        with self._lock:
            return [a for a in self._activations.values() if flow is None or a.flow == flow]

    # approval pauses and transitions

    def save_pause(
        self,
        task_id: str,
        pause_id: str,
        state: str,
        pending_calls: Sequence[dict[str, Any]],
        *,
        digest: str,
        outcome: dict[str, Any],
        now: float = 0.0,
    ) -> PauseRecord:
        with self._lock:
            task = self._task(task_id)
            if pause_id in self._pauses:
                raise InputError(f"pause {pause_id!r} already exists")
            record = PauseRecord(
                pause_id,
                task_id,
                "pending",
                state,
                digest,
                tuple(copy.deepcopy(list(pending_calls))),
                task.budget,
                task.usage(),
                created_at=now,
            )
            self._pauses[pause_id] = record
            task.outcome = copy.deepcopy(outcome)
            task.status = str(outcome.get("status", "needs_human"))
            task.updated_at = now
            return record

    def pause(self, pause_id: str) -> PauseRecord | None:
        with self._lock:
            return self._pauses.get(pause_id)

    def pauses(self, task_id: str | None = None) -> list[PauseRecord]:
        with self._lock:
            return [p for p in self._pauses.values() if task_id is None or p.task_id == task_id]

    def decide_pause(
        self, pause_id: str, *, who: str, decisions: dict[str, str], why: str = "", now: float = 0.0
    ) -> PauseRecord:
        with self._lock:
            record = self._pauses.get(pause_id)
            if record is None:
                raise NotFoundError(f"unknown pause {pause_id!r}")
            if record.status != "pending":
                raise PauseAlreadyResumed(
                    f"pause {pause_id!r} is {record.status} (by {record.decided_by or record.resumed_by!r}): "
                    "its decisions are final"
                )
            decided = replace(record, status="decided", decisions=dict(decisions), decided_by=who)
            self._pauses[pause_id] = decided
            return decided

    def claim_pause(
        self, pause_id: str, *, who: str, decisions: dict[str, str] | None = None, why: str = "", now: float = 0.0
    ) -> tuple[PauseRecord, TransitionRecord]:
        with self._lock:
            record = self._pauses.get(pause_id)
            if record is None:
                raise NotFoundError(f"unknown pause {pause_id!r}")
            if record.status == "resumed":
                raise PauseAlreadyResumed(
                    f"pause {pause_id!r} was already resumed by {record.resumed_by!r}: a pause resumes at most once"
                )
            applied = dict(record.decisions) if decisions is None else dict(decisions)
            if decisions is None and record.status != "decided":
                raise StateError(f"pause {pause_id!r} has no recorded decisions: pass them, or decide it first")
            task = self._task(record.task_id)
            claimed = replace(record, status="resumed", resumed_at=now, resumed_by=who, decisions=applied)
            self._pauses[pause_id] = claimed
            transition = TransitionRecord(
                f"tr-{uuid.uuid4().hex[:12]}",
                record.task_id,
                "resume",
                who,
                why,
                now,
                pause_id,
                copy.deepcopy(task.outcome),
                applied,
            )
            self._transitions.append(transition)
            task.outcome, task.status, task.updated_at = None, "running", now
            return claimed, transition

    def recover(
        self,
        task_id: str,
        *,
        who: str,
        why: str,
        kind: str = "recover",
        budget_delta: dict[str, Any] | None = None,
        now: float = 0.0,
    ) -> TransitionRecord:
        with self._lock:
            task = self._task(task_id)
            if task.status == "running" and (task.stop_reason is None or kind != "recover"):
                raise StateError(f"task {task_id!r} is running: there is nothing to recover")
            delta = dict(budget_delta or {})
            task.budget = task.budget.extended(delta)
            transition = TransitionRecord(
                f"tr-{uuid.uuid4().hex[:12]}",
                task_id,
                kind,
                who,
                why,
                now,
                None,
                copy.deepcopy(task.outcome),
                {},
                delta,
            )
            self._transitions.append(transition)
            if kind == "recover":
                task.stop_reason = None
            task.outcome, task.status, task.updated_at = None, "running", now
            return transition

    def transitions(self, task_id: str | None = None) -> list[TransitionRecord]:
        with self._lock:
            return [t for t in self._transitions if task_id is None or t.task_id == task_id]
