"""The store's records: the values its atomic operations take and return (a task's snapshot, an operation of the
ledger, a pause, a transition, a trace entry...), beside the :class:`~agents_loopguard.store.base.Store` interface
that re-exports them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from ..values.budget import Budget
from ..values.canonical import redact
from ..values.errors import StateError
from ..values.outcome import Outcome, Reason, RecoveryRecord, Usage

__all__ = [
    "MAX_CHAIN_WALK",
    "Activation",
    "Grant",
    "OperationClaim",
    "OperationRecord",
    "OperationState",
    "PauseAlreadyResumed",
    "PauseRecord",
    "Progress",
    "Settlement",
    "StepRecord",
    "StopMark",
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


REOPENED = "reopened"
"""The status the operators' views give a task that a recorded transition reopened and no run picked up yet (the
store keeps ``running`` as its status and ``reopened`` as its reason until then)."""


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
    family: str = ""
    """The family its metrics are summed under (:mod:`agents_loopguard.values.families`)."""
    reopened: bool = False
    """True from a recorded transition that reopened it (a reconciliation, a recovery, a resume's claim) until a run
    picks it up (:meth:`Store.ensure_task`, by the run's guard): ``running`` in :attr:`status`, but nothing runs it."""
    created: bool = field(default=False, compare=False)
    """From :meth:`Store.ensure_task`: True when this call created the task."""
    requested: Budget | None = field(default=None, compare=False)
    """From :meth:`Store.ensure_task`: the budget the caller passed when it differs from the stored one, which
    stays (limits change only through a recorded ``recover`` extension); None when they are the same."""

    def stored_outcome(self) -> Outcome | None:
        """The task's terminal :class:`~agents_loopguard.Outcome`, read back from its stored recovery record
        (:attr:`outcome`, a plain dict as the store keeps it), or ``None`` while the task runs. A record that is
        not a valid one raises :class:`~agents_loopguard.values.outcome.RecordError`.

        >>> record = {"task_id": "t", "status": "completed", "reason": "validated_done", "validated_revision": 1,
        ...           "validated_value": "ok", "used": {"models": 2, "tools": 1}, "operation_id": None,
        ...           "allowed_next_actions": ["return_result"]}
        >>> snap = TaskSnapshot("t", Budget(5, 5), Usage(2, 1), 1, 0, "completed", None, record)
        >>> outcome = snap.stored_outcome()
        >>> outcome.reason, outcome.used.models, outcome.done
        (<Reason.VALIDATED_DONE: 'validated_done'>, 2, True)
        """
        return None if self.outcome is None else RecoveryRecord.from_json(self.outcome).to_outcome()

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
