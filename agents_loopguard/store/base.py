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
from collections.abc import Sequence
from typing import Any

from ..values.budget import Budget
from ..values.errors import InputError, NotFoundError, StateError, StoreError
from ..values.outcome import Usage
from .queries import Queries
from .records import (
    MAX_CHAIN_WALK,
    Activation,
    Grant,
    OperationClaim,
    OperationRecord,
    OperationState,
    PauseAlreadyResumed,
    PauseRecord,
    Progress,
    Settlement,
    StepRecord,
    StopMark,
    TaskSnapshot,
    TraceEntry,
    TransitionRecord,
    WriteReservation,
    ensured,
    operation_blocks,
    operator_text,
)

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


class Store(Queries, abc.ABC):
    """The persistence interface of the guard. Every method is atomic; the operators' pages, the metrics' tallies
    and the prune are :class:`~agents_loopguard.store.queries.Queries`'."""

    # --- tasks and counters -----------------------------------------------------------------------------

    @abc.abstractmethod
    def ensure_task(
        self, task_id: str, budget: Budget, *, revision: int = 0, now: float = 0.0, family: str | None = None
    ) -> TaskSnapshot:
        """Create the task with this budget if it does not exist; return it. An existing task keeps its budget: the
        snapshot then carries the ``budget`` asked for in ``requested`` when it differs (``created`` says whether
        this call created the task), so the caller can say so. A new task's ``family`` is the one given, else the
        one :func:`~agents_loopguard.values.families.task_family` derives from its id; it never changes."""

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
        """Every task, oldest first (reads them all: the operators' views page with :meth:`task_page`)."""

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
        key: tuple[str, int] | None = None,
    ) -> Progress:
        """Record a result in one step: the trace entry, the ledger state of its write, and the progress.

        ``revision`` None records no progress (the run is ending before the progress rule applies). Otherwise the
        revision is raised to ``max(current, revision)``; the stall count resets when it advanced, stays when the
        poll was ``pending``, and grows by one otherwise. ``seen`` keys (cursors, record ids) are remembered and
        reported as seen before or not. ``key`` is a progress key and its new revision (:meth:`progress_keys`).
        """

    @abc.abstractmethod
    def progress_keys(self, task_id: str) -> dict[str, int]:
        """Each progress key of the task with its last (highest) revision, as :meth:`record_execution` recorded them
        (an unknown task has none; see :mod:`~agents_loopguard.engine.progress`)."""

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
