"""An in-process store for tests and single scripts. Atomic under one lock; gone when the process ends."""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..values.budget import Budget
from ..values.families import check_family, task_family
from ..values.outcome import Reason, Usage
from .base import (
    MAX_CHAIN_WALK,
    Activation,
    Grant,
    InputError,
    OperationClaim,
    OperationRecord,
    OperationState,
    PauseRecord,
    Progress,
    Settlement,
    StepRecord,
    StopMark,
    Store,
    TaskSnapshot,
    TraceEntry,
    TransitionRecord,
    WriteReservation,
    ensured,
    operator_text,
)
from .memory_queries import MemoryQueries
from .rules import (
    check_answer,
    check_claim,
    check_decide,
    check_reconcile,
    check_recover,
    check_tokens,
    cost_refusal,
    execution_refusal,
    reopens,
    token_refusal,
    turn_refusal,
    unknown_step,
    unknown_task,
)

__all__ = ["DEFAULT_TRACE_LIMIT", "MemoryStore"]

DEFAULT_TRACE_LIMIT = 1000
"""Trace entries a :class:`MemoryStore` keeps per task by default (the most recent ones)."""


@dataclass
class _Task:
    task_id: str
    budget: Budget
    revision: int
    created_at: float
    trace: deque[TraceEntry]
    """The most recent entries (a deque with the store's ``trace_limit`` as its maxlen)."""
    traced: int = 0
    """Entries ever appended: the sequence number of the last one."""
    models: int = 0
    tools: int = 0
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    stalled: int = 0
    status: str = "running"
    stop_reason: str | None = None
    outcome: dict[str, Any] | None = None
    updated_at: float = 0.0
    reopened: bool = False
    repeats: dict[str, tuple[int, float]] = field(default_factory=dict)
    """fingerprint -> (executions, first_at) at the current revision only (older revisions are never read again)."""
    seen: set[str] = field(default_factory=set)
    keys: dict[str, int] = field(default_factory=dict)
    """progress key -> its last revision (one entry a key: the older ones are never read again)."""
    tool_runs: dict[str, int] = field(default_factory=dict)
    """tool -> executions in the task (counted for the reservations that name a ``tool_limit``)."""
    family: str = ""
    refused: dict[str, int] = field(default_factory=dict)
    """reason -> calls refused, counted as the refusals are recorded (the trace keeps only the last entries)."""

    @property
    def used(self) -> Usage:
        return Usage(self.models, self.tools, self.cost, self.input_tokens, self.output_tokens)

    def snapshot(self) -> TaskSnapshot:
        return TaskSnapshot(
            task_id=self.task_id,
            budget=self.budget,
            used=self.used,
            revision=self.revision,
            stalled=self.stalled,
            status=self.status,
            stop_reason=self.stop_reason,
            outcome=copy.deepcopy(self.outcome),
            created_at=self.created_at,
            updated_at=self.updated_at,
            family=self.family,
            reopened=self.reopened,
        )

    def reopen(self, now: float) -> None:
        """Reopened by a recorded transition: running again once a run picks it up."""
        self.outcome, self.status, self.updated_at, self.reopened = None, "running", now, True

    def append(self, entry: TraceEntry) -> None:
        self.trace.append(entry)
        self.traced += 1
        if entry.result_class.startswith(("refused:", "shadow:")):  # a shadow verdict keeps its prefix
            reason = entry.result_class.removeprefix("refused:")
            self.refused[reason] = self.refused.get(reason, 0) + 1

    def advance(self, revision: int) -> None:
        """Raise the revision: the repetition counts of the old one can never be read again."""
        self.revision, self.stalled = revision, 0
        self.repeats.clear()


class MemoryStore(MemoryQueries, Store):
    """A :class:`~agents_loopguard.store.base.Store` in a dict, for one process.

    What it keeps per task is bounded, so a long-lived process does not grow with the length of its tasks:

    * the trace keeps the last ``trace_limit`` entries of each task (default :data:`DEFAULT_TRACE_LIMIT`; ``None``
      keeps them all); :meth:`trace` returns them with their sequence numbers since the task began, so a gap at the
      start shows what was dropped. The trace is a record for people: no decision reads it;
    * repetition counts are kept for the task's current revision only: the revision never goes back, and a
      reservation reads the count at the current revision, so a count of an older one can never decide again.

    The seen cursors and record ids are kept whole: forgetting one would let a pagination cycle pass as new (R9);
    each comes from an execution counted against the tool budget, which bounds them. Tasks, the ledger, pauses,
    activations and transitions are kept as long as the store lives (they are the decisions themselves).

    >>> from agents_loopguard import Budget
    >>> store = MemoryStore()
    >>> _ = store.ensure_task("t1", Budget(model_turns=1, tool_executions=1))
    >>> store.reserve_turn("t1").granted, store.reserve_turn("t1").reason
    (True, <Reason.MODEL_BUDGET: 'model_budget'>)
    >>> bounded = MemoryStore(trace_limit=2)
    >>> _ = bounded.ensure_task("t2", Budget(model_turns=5, tool_executions=0))
    >>> _ = [bounded.reserve_turn("t2") for _ in range(5)]
    >>> [entry.seq for entry in bounded.trace("t2")]
    [4, 5]
    """

    def __init__(self, *, trace_limit: int | None = DEFAULT_TRACE_LIMIT) -> None:
        if trace_limit is not None and (
            isinstance(trace_limit, bool) or not isinstance(trace_limit, int) or trace_limit < 1
        ):
            raise ValueError(f"trace_limit must be an int >= 1 or None (keep every entry), got {trace_limit!r}")
        self.trace_limit = trace_limit
        """Trace entries kept per task (the most recent); None keeps every entry."""
        self._lock = threading.RLock()
        self._tasks: dict[str, _Task] = {}
        self._operations: dict[str, OperationRecord] = {}
        self._activations: dict[str, Activation] = {}
        self._pauses: dict[str, PauseRecord] = {}
        self._transitions: list[TransitionRecord] = []
        self._steps: dict[tuple[str, str], StepRecord] = {}
        self._pruned_refusals: dict[tuple[str, str], int] = {}
        """(family, reason) -> refusals of the tasks pruned since (the counter never goes back)."""
        self._activation_times: dict[str, float] = {}
        """activation id -> when it was recorded (a prune removes old ones)."""

    def _task(self, task_id: str) -> _Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise unknown_task(task_id) from None

    # tasks and counters

    def ensure_task(
        self, task_id: str, budget: Budget, *, revision: int = 0, now: float = 0.0, family: str | None = None
    ) -> TaskSnapshot:
        with self._lock:
            task = self._tasks.get(task_id)
            created = task is None
            if task is None:
                trace: deque[TraceEntry] = deque(maxlen=self.trace_limit)
                named = check_family(family) or task_family(task_id)
                task = _Task(task_id, budget, revision, now, trace, updated_at=now, family=named)
                self._tasks[task_id] = task
            task.reopened = False  # a run's guard opens it: it runs again
            return ensured(task.snapshot(), budget, created=created)

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
            refusal = turn_refusal(task)
            if refusal is not None:
                return refusal
            task.models += 1
            task.updated_at = now
            task.append(
                TraceEntry(
                    kind="model",
                    result_class="reserved",
                    revision=task.revision,
                    models=task.models,
                    tools=task.tools,
                    at=now,
                )
            )
            return Grant(True, None, task.used, task.revision)

    def reserve_execution(
        self,
        task_id: str,
        fingerprint: str,
        *,
        max_repeats: int,
        now: float = 0.0,
        max_wait: float | None = None,
        poll: bool = False,
        tool_limit: tuple[str, int] | None = None,
    ) -> Grant:
        with self._lock:
            task = self._task(task_id)
            count, first_at = task.repeats.get(fingerprint, (0, now))
            runs = task.tool_runs.get(tool_limit[0], 0) if tool_limit is not None else 0
            refusal = execution_refusal(
                task,
                count,
                first_at,
                max_repeats=max_repeats,
                now=now,
                poll=poll,
                max_wait=max_wait,
                tool_limit=tool_limit,
                tool_runs=runs,
            )
            if refusal is not None:
                return refusal
            task.repeats[fingerprint] = (count + 1, first_at)
            if tool_limit is not None:
                task.tool_runs[tool_limit[0]] = runs + 1
            task.tools += 1
            task.updated_at = now
            return Grant(True, None, task.used, task.revision)

    def reserve_cost(self, task_id: str, amount: float) -> Grant:
        with self._lock:
            task = self._task(task_id)
            refusal = cost_refusal(task, amount)
            if refusal is not None:
                return refusal
            task.cost += amount
            return Grant(True, None, task.used, task.revision)

    def settle_cost(self, task_id: str, reserved: float, actual: float) -> Usage:
        with self._lock:
            task = self._task(task_id)
            task.cost = max(0.0, task.cost - reserved + actual)
            return task.used

    def reserve_tokens(self, task_id: str, input_tokens: int, output_tokens: int) -> Grant:
        check_tokens(input_tokens, output_tokens)
        with self._lock:
            task = self._task(task_id)
            refusal = token_refusal(task, input_tokens, output_tokens)
            if refusal is not None:
                return refusal
            task.input_tokens += input_tokens
            task.output_tokens += output_tokens
            return Grant(True, None, task.used, task.revision)

    def settle_tokens(self, task_id: str, *, reserved: tuple[int, int], actual: tuple[int, int]) -> Usage:
        check_tokens(*reserved)
        check_tokens(*actual)
        with self._lock:
            task = self._task(task_id)
            task.input_tokens = max(0, task.input_tokens - reserved[0] + actual[0])
            task.output_tokens = max(0, task.output_tokens - reserved[1] + actual[1])
            return task.used

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
        tool_limit: tuple[str, int] | None = None,
    ) -> WriteReservation:
        with self._lock:  # the base class's three steps under one lock: atomic for this process's threads
            return super().reserve_write(
                task_id, operation_id, fingerprint, tool, max_repeats=max_repeats, now=now, tool_limit=tool_limit
            )

    def operations(self, task_id: str | None = None) -> list[OperationRecord]:
        with self._lock:
            return [r for r in self._operations.values() if task_id is None or r.task_id == task_id]

    def reconcile_operation(
        self, operation_id: str, state: OperationState, result: Any = None, *, now: float = 0.0
    ) -> OperationRecord:
        state = OperationState(state)
        with self._lock:
            old = check_reconcile(operation_id, self._operations.get(operation_id))
            if state is OperationState.UNKNOWN:
                return old
            record = replace(old, state=state, result=copy.deepcopy(result), updated_at=now)
            self._operations[operation_id] = record
            return record

    def settle_operation(
        self,
        operation_id: str,
        state: OperationState,
        result: Any = None,
        *,
        expected: OperationState,
        who: str,
        why: str,
        kind: str,
        now: float = 0.0,
    ) -> Settlement:
        state, expected = OperationState(state), OperationState(expected)
        with self._lock:
            record = check_answer(operation_id, self._operations.get(operation_id), expected)
            if state is not expected:
                record = replace(record, state=state, result=copy.deepcopy(result), updated_at=now)
                self._operations[operation_id] = record
            task = self._task(record.task_id)
            unknown_left = any(
                op.task_id == task.task_id and op.state is OperationState.UNKNOWN for op in self._operations.values()
            )
            transition = TransitionRecord.new(
                task.task_id,
                kind,
                who,
                why,
                now,
                from_outcome=copy.deepcopy(task.outcome),
                operation_id=operation_id,
            )
            self._transitions.append(transition)
            reopened = reopens(task.status, unknown_left)
            if reopened:
                task.reopen(now)
            return Settlement(record, transition, reopened)

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
        key: tuple[str, int] | None = None,
    ) -> Progress:
        with self._lock:
            task = self._task(task_id)
            if key is not None:
                task.keys[key[0]] = max(task.keys.get(key[0], 0), key[1])
            if operation is not None:
                op_id, state, result = operation
                old = self._operations.get(op_id)
                if old is not None:
                    self._operations[op_id] = replace(
                        old, state=OperationState(state), result=copy.deepcopy(result), updated_at=entry.at
                    )
            if revision is not None:
                if revision > task.revision:
                    task.advance(revision)
                elif not pending:
                    task.stalled += 1
            seen_before = tuple(key in task.seen for key in seen)
            task.seen.update(seen)
            task.append(entry)
            task.updated_at = entry.at
            return Progress(task.revision, task.stalled, seen_before, task.used)

    def progress_keys(self, task_id: str) -> dict[str, int]:
        with self._lock:
            task = self._tasks.get(task_id)
            return dict(task.keys) if task is not None else {}

    def begin_step(self, task_id: str, key: str, *, now: float = 0.0) -> StepRecord:
        with self._lock:
            self._task(task_id)
            step = self._steps.get((task_id, key))
            if step is None or not step.done:
                step = StepRecord(key, 1 if step is None else step.attempts + 1)
                self._steps[(task_id, key)] = step
            return copy.deepcopy(step)

    def end_step(self, task_id: str, key: str, output: Any, *, now: float = 0.0) -> StepRecord:
        stored = copy.deepcopy(output)
        with self._lock:
            step = self._steps.get((task_id, key))
            if step is None:
                raise unknown_step(task_id, key)
            if not step.done:
                step = self._steps[(task_id, key)] = replace(step, done=True, output=stored)
            return copy.deepcopy(step)

    def append_trace(self, task_id: str, entry: TraceEntry) -> None:
        with self._lock:
            self._task(task_id).append(entry)

    def trace(self, task_id: str) -> list[TraceEntry]:
        with self._lock:
            task = self._task(task_id)
            first = task.traced - len(task.trace) + 1
            return [replace(entry, seq=seq) for seq, entry in enumerate(task.trace, first)]

    # stop mark and terminal outcome

    def set_stop_mark(
        self, task_id: str, reason: str = "stop_requested", *, who: str | None = None, now: float = 0.0
    ) -> StopMark:
        with self._lock:
            task = self._task(task_id)
            if task.stop_reason is not None:
                return StopMark(task.snapshot(), False)
            task.stop_reason = operator_text(reason) or "stop_requested"
            task.updated_at = now
            snapshot = task.snapshot()
            if who is not None:
                stop = TransitionRecord.new(
                    task_id,
                    "stop",
                    operator_text(who),
                    task.stop_reason,
                    now,
                    from_outcome=copy.deepcopy(snapshot.outcome),
                )
                self._transitions.append(stop)
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
            self._activation_times[activation_id] = now
            return record

    def _activation_that_wrote(self, operation_id: str | None) -> Activation | None:
        """The activation whose run wrote ``operation_id`` (its task id is the activation id), if any."""
        origin = self._operations.get(operation_id) if operation_id else None
        return self._activations.get(origin.task_id) if origin is not None else None

    def activations(self, flow: str | None = None) -> list[Activation]:
        with self._lock:
            return [a for a in self._activations.values() if flow is None or a.flow == flow]

    def activation(self, activation_id: str) -> Activation | None:
        with self._lock:
            return self._activations.get(activation_id)

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
                task.used,
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
        self,
        pause_id: str,
        *,
        who: str,
        decisions: dict[str, str],
        why: str = "",
        digest: str | None = None,
        now: float = 0.0,
    ) -> PauseRecord:
        with self._lock:
            record = check_decide(pause_id, self._pauses.get(pause_id))
            decided = replace(
                record,
                status="decided",
                decisions=dict(decisions),
                decided_by=who,
                decisions_digest=digest,
                decided_why=why,
                decided_at=now,
            )
            self._pauses[pause_id] = decided
            return decided

    def claim_pause(
        self, pause_id: str, *, who: str, decisions: dict[str, str] | None = None, why: str = "", now: float = 0.0
    ) -> tuple[PauseRecord, TransitionRecord]:
        with self._lock:
            record = check_claim(pause_id, self._pauses.get(pause_id), decisions=decisions is not None)
            applied = dict(record.decisions) if decisions is None else dict(decisions)
            task = self._task(record.task_id)
            claimed = replace(record, status="resumed", resumed_at=now, resumed_by=who, decisions=applied)
            self._pauses[pause_id] = claimed
            transition = TransitionRecord.new(
                record.task_id,
                "resume",
                who,
                why,
                now,
                pause_id=pause_id,
                from_outcome=copy.deepcopy(task.outcome),
                decisions=applied,
            )
            self._transitions.append(transition)
            task.reopen(now)
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
            check_recover(task_id, task, kind)
            delta = dict(budget_delta or {})
            task.budget = task.budget.extended(delta)
            transition = TransitionRecord.new(
                task_id, kind, who, why, now, from_outcome=copy.deepcopy(task.outcome), budget_delta=delta
            )
            self._transitions.append(transition)
            if kind == "recover":
                task.stop_reason = None
            task.reopen(now)
            return transition

    def transitions(self, task_id: str | None = None) -> list[TransitionRecord]:
        with self._lock:
            return [t for t in self._transitions if task_id is None or t.task_id == task_id]

    def label_task(self, task_id: str, label: str, *, who: str, why: str = "", now: float = 0.0) -> TransitionRecord:
        with self._lock:
            self._task(task_id)
            transition = TransitionRecord.new(task_id, "label", who, why, now, decisions={"label": label})
            self._transitions.append(transition)
            return transition
