"""The store interface: the only place with I/O, made of atomic operations (never get-then-set).

A store keeps, per task, the budget and its counters, the validated revision and stall count, the stop mark, the
repetition counts, the seen cursors and records, the trace and the terminal outcome; and, across tasks, the operation
ledger keyed by the business operation id. Each method is one atomic step: a reservation either happens entirely
or is refused with a reason, so two workers can never both take the last unit of a budget or the same operation.

Implementations: :class:`~agents_loopguard.store.memory.MemoryStore` (one process) and
:class:`~agents_loopguard.store.sql.SQLStore` (SQLite file or PostgreSQL, shared by many workers).
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from ..values.budget import Budget
from ..values.canonical import redact
from ..values.errors import InputError, NotFoundError, StateError, StoreError
from ..values.outcome import Reason, Usage

__all__ = [
    "MAX_CHAIN_WALK",
    "Activation",
    "Grant",
    "InputError",
    "NotFoundError",
    "OperationClaim",
    "OperationRecord",
    "OperationState",
    "PauseAlreadyResumed",
    "PauseRecord",
    "Progress",
    "Settlement",
    "StateError",
    "StepRecord",
    "StopMark",
    "Store",
    "StoreError",
    "TaskSnapshot",
    "TraceEntry",
    "TransitionRecord",
    "WriteReservation",
    "ensured",
    "operation_blocks",
    "operator_text",
]


MAX_CHAIN_WALK = 10_000
"""How far :meth:`Store.activate` follows a chain's ancestry (a chain is acyclic: each link is older)."""


class PauseAlreadyResumed(StateError):
    """The pause was already resumed (or is being resumed by another process): it resumes at most once."""


class OperationState(str, Enum):
    """The state of a write in the ledger."""

    UNKNOWN = "unknown"
    """Reserved; the write may or may not have happened. Blocks re-sending until reconciled."""
    COMMITTED = "committed"
    """Verified as done; its stored result is returned instead of executing again."""
    NOT_COMMITTED = "not_committed"
    """Verified as not done; it may be retried within the remaining budget."""

    def __str__(self) -> str:
        return self.value


def operation_blocks(state: OperationState | str, payload: str, fingerprint: str) -> bool:
    """True when an operation already in the ledger may not run again for a call with ``fingerprint``.

    Only a verified non-execution (``not_committed``) of the same payload may be retried; a committed, unknown or
    other-payload operation is answered from the ledger, and no counter moves.

    >>> operation_blocks("not_committed", "fp", "fp"), operation_blocks("committed", "fp", "fp")
    (False, True)
    """
    return not (OperationState(state) is OperationState.NOT_COMMITTED and payload == fingerprint)


def operator_text(text: str, secrets: Iterable[str] = ()) -> str:
    """An operator's free text (who, why, a decision note, a stop reason) as it may be stored: credentials and the
    ``secrets`` given replaced by ``[redacted]`` (:func:`agents_loopguard.values.canonical.redact`).

    >>> operator_text("ops password=hunter2"), operator_text("ana on call", secrets=["on call"])
    ('ops password=[redacted]', 'ana [redacted]')
    """
    return str(redact(text, secrets=secrets))


@dataclass(frozen=True)
class OperationRecord:
    """One business operation in the ledger."""

    operation_id: str
    task_id: str
    tool: str
    payload: str
    """Fingerprint of the canonical call; the same id with another payload is a conflict."""
    state: OperationState
    result: Any = None
    """The stored (redacted) result of a committed operation."""
    attempts: int = 1
    """Times this operation was reserved for execution."""
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True)
class OperationClaim:
    """The answer to :meth:`Store.reserve_operation`."""

    claimed: bool
    """True when this caller now owns the execution (the record is ``unknown`` and was created or re-opened)."""
    record: OperationRecord
    """The record after the call: the caller's own reservation, or the one that was already there."""


@dataclass(frozen=True)
class WriteReservation:
    """The answer to :meth:`Store.reserve_write`: the execution grant and the ledger claim, decided together."""

    grant: Grant | None
    """None when the ledger answered before any counter was touched (the operation exists and may not run again)."""
    claim: OperationClaim | None
    """The ledger's answer; None when the execution was refused (then nothing was reserved or claimed)."""


@dataclass(frozen=True)
class Settlement:
    """The answer to :meth:`Store.settle_operation`: an operator's answer about an operation, recorded."""

    operation: OperationRecord
    """The operation after the answer."""
    transition: TransitionRecord
    """The transition that records the answer (who, why, the operation, the task's outcome before)."""
    reopened: bool
    """True when the answer reopened the task (it needed reconciliation and nothing of it is unknown any more)."""


@dataclass(frozen=True)
class Grant:
    """The answer to a reservation: granted, or refused with a reason."""

    granted: bool
    reason: Reason | None = None
    used: Usage = field(default_factory=Usage)
    """Counters after the reservation (or at the refusal)."""
    revision: int = 0
    """The task's validated revision when the reservation was decided."""
    detail: str = ""
    stalled: int | None = None
    """The task's stall count after a granted reservation, when the store reads it (SQLStore; else None)."""


@dataclass(frozen=True)
class Progress:
    """The task's progress after recording a result."""

    revision: int
    stalled: int
    """Verified results in a row without the revision advancing."""
    seen_before: tuple[bool, ...] = ()
    """For each key passed in ``seen``: whether the task had seen it already."""
    used: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class TaskSnapshot:
    """A task as the store holds it."""

    task_id: str
    budget: Budget
    used: Usage
    revision: int
    stalled: int
    status: str
    """``running`` or the terminal status of its outcome."""
    stop_reason: str | None
    outcome: dict[str, Any] | None
    """The stored recovery record of the terminal outcome, if any."""
    created_at: float = 0.0
    updated_at: float = 0.0
    created: bool = field(default=False, compare=False)
    """From :meth:`Store.ensure_task`: True when this call created the task."""
    requested: Budget | None = field(default=None, compare=False)
    """From :meth:`Store.ensure_task`: the budget the caller passed when it differs from the stored one, which
    stays (limits change only through a recorded ``recover`` extension); None when they are the same."""

    def budget_changes(self) -> dict[str, tuple[Any, Any]]:
        """The limits the caller asked for that differ from the stored ones: name -> (stored, requested).

        >>> snap = TaskSnapshot("t", Budget(5, 5), Usage(), 0, 0, "running", None, None, requested=Budget(9, 5))
        >>> snap.budget_changes()
        {'model_turns': (5, 9)}
        """
        if self.requested is None:
            return {}
        stored, requested = vars(self.budget), vars(self.requested)
        return {name: (stored[name], requested[name]) for name in stored if stored[name] != requested[name]}


def ensured(snapshot: TaskSnapshot, requested: Budget, *, created: bool) -> TaskSnapshot:
    """What :meth:`Store.ensure_task` answers: the task, whether this call created it, and the budget asked for
    when it differs from the stored one."""
    differs = not created and snapshot.budget != requested
    return replace(snapshot, created=created, requested=requested if differs else None)


@dataclass(slots=True)
class TraceEntry:
    """One guarded step, as stored (arguments normalized and redacted)."""

    kind: str
    """``model`` or ``tool``."""
    tool: str | None = None
    args: Any = None
    result_class: str = ""
    """ok, retryable, fatal, needs_human, refused:<reason>, exception, cached..."""
    revision: int = 0
    models: int = 0
    tools: int = 0
    fingerprint: str | None = None
    operation_id: str | None = None
    operation_state: str | None = None
    at: float = 0.0
    seq: int = 0


@dataclass(frozen=True)
class StepRecord:
    """One step of a durable engine's workflow as the task saw it (R17): a model call or a tool execution, keyed by
    the engine's own identity of the step (see :class:`~agents_loopguard.run.DurableSteps`)."""

    key: str
    attempts: int
    """How many times the step began: more than 1 when the engine re-executed it after its worker died."""
    done: bool = False
    """The step ended and recorded what the model read (:attr:`output`): a replay returns it, runs nothing."""
    output: Any = None


@dataclass(frozen=True)
class StopMark:
    """The answer to :meth:`Store.set_stop_mark`."""

    task: TaskSnapshot
    """The task after the call, with its stop mark (the first one set: a later call keeps it)."""
    newly_set: bool
    """True for the one call that set the mark; False when the task already had one."""


@dataclass(frozen=True)
class Activation:
    """One activation of a workflow, as :meth:`Store.activate` recorded it."""

    granted: bool
    activation_id: str
    flow: str
    chain_id: str
    """The activation that started this chain (itself, for an activation from outside)."""
    depth: int
    """Re-entries: earlier activations of the same flow among this activation's ancestors (0 from outside)."""
    origin_operation_id: str | None = None
    reason: Reason | None = None
    duplicate: bool = False
    """True when this activation id was already recorded (the same event delivered twice)."""


@dataclass(frozen=True)
class PauseRecord:
    """An approval pause: the SDK's state, stored with the task's budget and counters at that moment."""

    pause_id: str
    task_id: str
    status: str
    """``pending``; ``decided`` once an operator recorded decisions; ``resumed`` once a process claimed it."""
    state: str
    """The serialized run state (for the Agents SDK: ``RunState.to_json()`` as text)."""
    digest: str
    """sha256 of the state and the pending calls; a stored pause whose digest does not match is refused."""
    pending_calls: tuple[dict[str, Any], ...]
    """Calls awaiting a decision: call_id, tool, arguments (canonical JSON text), operation_id."""
    budget: Budget
    used: Usage
    created_at: float = 0.0
    resumed_at: float | None = None
    resumed_by: str | None = None
    decisions: dict[str, str] = field(default_factory=dict)
    """call_id -> ``approve`` or ``reject`` (recorded by decide_pause, or given to claim_pause)."""
    decided_by: str | None = None
    decisions_digest: str | None = None
    """The digest of the recorded decisions, over the pause, the decisions and who decided
    (:func:`agents_loopguard.ops.approvals.decisions_digest`); None before an operator decided."""
    decided_why: str = ""
    """The note the operator gave with the decisions (redacted like the trace; R18)."""
    decided_at: float | None = None
    """When the operator decided (None before, and for decisions given straight to the resume)."""


@dataclass(frozen=True)
class TransitionRecord:
    """An explicit, recorded operator step on a task: a resume, a recovery, an answer about an operation (which
    reopens the task when it needed reconciliation and nothing of it is unknown any more), or a stop."""

    transition_id: str
    task_id: str
    kind: str
    """``resume`` (of a pause), ``recover`` (from stopped/partial/needs_reconciliation), ``reconcile`` (an unknown
    operation answered), ``confirm`` (a known operation's state confirmed), ``correct`` (the ledger corrected),
    ``stop`` (who set the stop mark; ``why`` is its reason), ``label`` (an operator's judgement of the run, in
    ``decisions["label"]``: ``correct`` or ``loop``; see :meth:`Store.label_task`)."""
    who: str
    why: str = ""
    at: float = 0.0
    pause_id: str | None = None
    from_outcome: dict[str, Any] | None = None
    """The recovery record the task had before this transition."""
    decisions: dict[str, str] = field(default_factory=dict)
    budget_delta: dict[str, Any] = field(default_factory=dict)
    """Explicit extension of the limits: model_turns, tool_executions, cost and the token limits (added), deadline
    (replaced)."""
    operation_id: str | None = None
    """The operation an answer (reconcile, confirm, correct) was about."""

    @classmethod
    def new(
        cls,
        task_id: str,
        kind: str,
        who: str,
        why: str,
        at: float,
        *,
        pause_id: str | None = None,
        from_outcome: dict[str, Any] | None = None,
        decisions: dict[str, str] | None = None,
        budget_delta: dict[str, Any] | None = None,
        operation_id: str | None = None,
    ) -> TransitionRecord:
        """A transition with a new id (``tr-`` and 12 hex digits).

        >>> TransitionRecord.new("t-1", "recover", "lead", "two more turns", 5.0).transition_id.startswith("tr-")
        True
        """
        return cls(
            f"tr-{uuid.uuid4().hex[:12]}",
            task_id,
            kind,
            who,
            why,
            at,
            pause_id,
            from_outcome,
            dict(decisions or {}),
            dict(budget_delta or {}),
            operation_id,
        )


class Store(abc.ABC):
    """The persistence interface of the guard. Every method is atomic."""

    # --- tasks and counters -----------------------------------------------------------------------------

    @abc.abstractmethod
    def ensure_task(self, task_id: str, budget: Budget, *, revision: int = 0, now: float = 0.0) -> TaskSnapshot:
        """Create the task with this budget if it does not exist; return it. An existing task keeps its budget: the
        snapshot then carries the ``budget`` asked for in ``requested`` when it differs (``created`` says whether
        this call created the task), so the caller can say so."""

    @abc.abstractmethod
    def task(self, task_id: str) -> TaskSnapshot | None:
        """The task, or ``None``."""

    def committed_task(self, task_id: str) -> TaskSnapshot | None:
        """The task as the database holds it for every worker, read without first writing what this store deferred
        (:class:`~agents_loopguard.store.sql.SQLStore`: trace rows and read results, which move no counter and which
        its next step writes); the engine's read before it stores an outcome. Other stores: :meth:`task`."""
        return self.task(task_id)

    @abc.abstractmethod
    def tasks(self) -> list[TaskSnapshot]:
        """Every task, oldest first."""

    @abc.abstractmethod
    def reserve_turn(self, task_id: str, *, now: float = 0.0) -> Grant:
        """Reserve one model turn: refused (stop_requested, model_budget) when stopped, finished or exhausted."""

    @abc.abstractmethod
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
        """Reserve one tool execution of ``fingerprint`` at the task's current revision.

        Refused, in this order: stop_requested (stop mark or finished task); same_call (or wait_budget for a poll)
        when the fingerprint already ran ``max_repeats`` times at this revision, or a poll has waited ``max_wait``;
        tool_limit when ``tool_limit`` = (tool name, max executions of that tool in the task) is reached;
        tool_budget when the execution limit is reached. A grant counts the execution, the repetition and the
        tool's own count together (the tool is counted only when ``tool_limit`` is given).
        """

    @abc.abstractmethod
    def reserve_cost(self, task_id: str, amount: float) -> Grant:
        """Reserve ``amount`` of money against the task's cost budget; refused (cost_budget) if it would exceed."""

    @abc.abstractmethod
    def settle_cost(self, task_id: str, reserved: float, actual: float) -> Usage:
        """Replace a reservation of ``reserved`` by the ``actual`` cost."""

    @abc.abstractmethod
    def reserve_tokens(self, task_id: str, input_tokens: int, output_tokens: int) -> Grant:
        """Reserve tokens against the task's token limits (input, output, total) before a model request; refused
        (stop_requested, token_budget) if any limit would be exceeded, and then nothing is reserved."""

    @abc.abstractmethod
    def settle_tokens(self, task_id: str, *, reserved: tuple[int, int], actual: tuple[int, int]) -> Usage:
        """Replace a reservation of ``reserved`` (input, output) tokens by the ``actual`` usage the model reported
        (counters never go below zero)."""

    # --- the operation ledger ---------------------------------------------------------------------------

    @abc.abstractmethod
    def lookup_operation(self, operation_id: str) -> OperationRecord | None:
        """The ledger record of an operation, or ``None``."""

    @abc.abstractmethod
    def reserve_operation(
        self, task_id: str, operation_id: str, payload: str, tool: str, *, now: float = 0.0
    ) -> OperationClaim:
        """Atomically reserve an operation as ``unknown`` before it executes.

        Claimed when the id is new, or when it is ``not_committed`` with the same payload (a verified retry).
        Otherwise the existing record is returned unclaimed (committed, unknown, or another payload).
        """

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
        """Reserve a write's execution and its operation in one step, before the write runs.

        In order: an operation already in the ledger that may not run again (committed, unknown, or another
        payload) is returned unclaimed and no counter is touched; otherwise the execution is reserved as by
        :meth:`reserve_execution` (refusal: nothing changes) and the operation as by :meth:`reserve_operation`.

        This default composes those three methods (under concurrency a claim lost between them has still used the
        execution); :class:`~agents_loopguard.store.sql.SQLStore` does it atomically, in one statement on PostgreSQL.
        """
        existing = self.lookup_operation(operation_id)
        if existing is not None and operation_blocks(existing.state, existing.payload, fingerprint):
            return WriteReservation(None, OperationClaim(False, existing))
        grant = self.reserve_execution(task_id, fingerprint, max_repeats=max_repeats, now=now, tool_limit=tool_limit)
        if not grant.granted:
            return WriteReservation(grant, None)
        return WriteReservation(grant, self.reserve_operation(task_id, operation_id, fingerprint, tool, now=now))

    @abc.abstractmethod
    def operations(self, task_id: str | None = None) -> list[OperationRecord]:
        """Ledger records, of one task or of all."""

    @abc.abstractmethod
    def reconcile_operation(
        self, operation_id: str, state: OperationState, result: Any = None, *, now: float = 0.0
    ) -> OperationRecord:
        """Record what the receiving system says about an ``unknown`` operation (committed/not_committed).

        Raises :class:`StoreError` if the operation does not exist or is not ``unknown``.
        """

    @abc.abstractmethod
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
        """Record an operator's answer about an operation, in one step.

        The operation moves from ``expected`` to ``state`` with ``result`` (``state == expected`` changes nothing:
        a confirmation); a ``kind`` transition (``reconcile``, ``confirm``, ``correct``) records it with who, why and
        the operation id; and the operation's task is reopened (status running, stop mark kept, counters untouched)
        when it finished as ``needs_reconciliation`` and none of its operations is unknown any more.

        Raises :class:`NotFoundError` for an unknown operation, :class:`StateError` when the operation is not in the
        ``expected`` state (it changed meanwhile); nothing is written then.
        """

    # --- results and progress ---------------------------------------------------------------------------

    @abc.abstractmethod
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
        """Record a result in one step: the trace entry, the ledger state of its write, and the progress.

        ``revision`` None records no progress (the run is ending before the progress rule applies). Otherwise the
        revision is raised to ``max(current, revision)``; the stall count resets when it advanced, stays when the
        poll was ``pending``, and grows by one otherwise. ``seen`` keys (cursors, record ids) are remembered and
        reported as seen before or not.
        """

    @abc.abstractmethod
    def begin_step(self, task_id: str, key: str, *, now: float = 0.0) -> StepRecord:
        """A durable engine's step begins, in one step: recorded with ``attempts`` 1 the first time; a step that
        began and never ended (its worker died) counts one more attempt; an ended step is returned unchanged (the
        engine is replaying it: its recorded output stands)."""

    @abc.abstractmethod
    def end_step(self, task_id: str, key: str, output: Any, *, now: float = 0.0) -> StepRecord:
        """Record that the step ended and what the model read (``output``, stored as JSON); a step that already ended
        keeps its first output. Raises :class:`NotFoundError` for a step that never began."""

    @abc.abstractmethod
    def append_trace(self, task_id: str, entry: TraceEntry) -> None:
        """Append a trace entry that records no progress (a refusal, a model turn's answer...)."""

    @abc.abstractmethod
    def trace(self, task_id: str) -> list[TraceEntry]:
        """The task's trace in order."""

    # --- stop mark and terminal outcome -----------------------------------------------------------------

    @abc.abstractmethod
    def set_stop_mark(
        self, task_id: str, reason: str = "stop_requested", *, who: str | None = None, now: float = 0.0
    ) -> StopMark:
        """Set the stop mark if the task has none, and say whether this call set it, in one atomic step: every
        later reservation of the task, by any worker, is refused. The first mark wins; with ``who``, the call that
        sets it also records a ``stop`` transition (who, why = the reason, the task's outcome at that moment).
        Raises :class:`NotFoundError` for an unknown task."""

    def request_stop(self, task_id: str, reason: str = "stop_requested", *, now: float = 0.0) -> TaskSnapshot:
        """Set the stop mark (see :meth:`set_stop_mark`); return the task."""
        return self.set_stop_mark(task_id, reason, now=now).task

    @abc.abstractmethod
    def finish(self, task_id: str, record: dict[str, Any], *, now: float = 0.0) -> dict[str, Any]:
        """Store the terminal recovery record if the task has none yet; return the one stored (first wins)."""

    # --- workflow re-entry (triggers) -------------------------------------------------------------------

    @abc.abstractmethod
    def activate(
        self,
        flow: str,
        activation_id: str,
        *,
        origin_operation_id: str | None,
        max_depth: int,
        now: float = 0.0,
    ) -> Activation:
        """Record an activation of ``flow`` atomically and decide whether it may run.

        When ``origin_operation_id`` names an operation in the ledger written by a task that was itself an
        activation (of any flow), this activation joins that activation's chain; its ``depth`` is the number of
        earlier activations of ``flow`` among its ancestors, so a flow re-triggered by its own effect, directly or
        through other flows (A -> B -> A), is a re-entry, and beyond ``max_depth`` it is refused
        (``trigger_chain``). An activation id seen before returns its first record (``duplicate``). The
        activation id is also the task id of the run it starts.
        """

    @abc.abstractmethod
    def activations(self, flow: str | None = None) -> list[Activation]:
        """Recorded activations, oldest first."""

    def activation(self, activation_id: str) -> Activation | None:
        """The recorded activation of that id (``None``: no activation has it, whatever task may).

        This default scans :meth:`activations`; the backends look the id up.
        """
        return next((a for a in self.activations() if a.activation_id == activation_id), None)

    # --- approval pauses and transitions ----------------------------------------------------------------

    @abc.abstractmethod
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
        """In one transaction: store the pause with the task's budget and counters, and finish the task with
        ``outcome`` (needs_human/approval). Raises :class:`StoreError` if the pause id exists."""

    @abc.abstractmethod
    def pause(self, pause_id: str) -> PauseRecord | None:
        """The pause, or ``None``."""

    @abc.abstractmethod
    def pauses(self, task_id: str | None = None) -> list[PauseRecord]:
        """Pauses of one task or all, oldest first."""

    @abc.abstractmethod
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
        """Record an operator's approve/reject decisions on a pending pause (``pending`` -> ``decided``) with their
        ``digest``, to be applied by the process that resumes it. Serialized by the database: one decision wins.

        Raises :class:`PauseAlreadyResumed` if the pause is not pending any more, :class:`StoreError` if it does
        not exist. Checking that the decisions name the pause's own calls is the caller's rule (``sdk.pauses``).
        """

    @abc.abstractmethod
    def claim_pause(
        self, pause_id: str, *, who: str, decisions: dict[str, str] | None = None, why: str = "", now: float = 0.0
    ) -> tuple[PauseRecord, TransitionRecord]:
        """Atomically move a ``pending`` or ``decided`` pause to ``resumed`` (one claimer wins), record the
        ``resume`` transition linked to the pause (who, when, the decisions applied), and reopen the task (status
        running, counters untouched). ``decisions`` None applies the recorded ones (of a ``decided`` pause).

        Raises :class:`PauseAlreadyResumed` if the pause was resumed already, :class:`StoreError` if it does not
        exist or has no decisions to apply.
        """

    @abc.abstractmethod
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
        """Reopen a finished task by an explicit, recorded decision: the limits may grow by ``budget_delta``
        (model_turns, tool_executions, cost are added; deadline is replaced), the counters are never reset, the
        stop mark is cleared only if ``kind == "recover"``. Raises :class:`StoreError` if the task is running."""

    @abc.abstractmethod
    def transitions(self, task_id: str | None = None) -> list[TransitionRecord]:
        """Recorded transitions, oldest first."""

    @abc.abstractmethod
    def label_task(self, task_id: str, label: str, *, who: str, why: str = "", now: float = 0.0) -> TransitionRecord:
        """Record an operator's label on a task as a ``label`` transition (``decisions={"label": label}``: ``correct``,
        the guard should let such work run; ``loop``, it should cut it), read by ``loopguard tune``; the latest label
        of a task counts. Counters, outcome and stop mark are untouched. :class:`NotFoundError` for an unknown
        task."""
