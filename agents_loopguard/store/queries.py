"""What the operators' views, the metrics and retention ask of a store: pages, tallies and prunes, each bounded (R22).

Every list is a page: at most ``limit`` rows after a *keyset* (the sort key of the last row of the page before),
read through an index, so a page costs the same on a store of a thousand tasks or of millions. The orders are
stable (creation time and id: a row never moves between pages while a task runs): tasks and operations newest
first, pauses oldest first (the longest waiting on top), transitions newest first, a task's timeline last step first.

:meth:`Queries.tallies` answers the metrics in bounded time: ended tasks from counters the database keeps as tasks
end, reopen or are pruned (a trigger on the task table, in the same transaction), refusals from a counter kept as
they are recorded, and the running tasks, pending pauses and unknown writes read through their indexes.

:meth:`Queries.prune` deletes one short batch of what a retention policy allows (see
:mod:`agents_loopguard.ops.retention` for the policy): never a running or paused task, never a task with an
``unknown`` operation, never an ``unknown`` operation.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import OperationRecord, PauseRecord, TaskSnapshot, TraceEntry, TransitionRecord

__all__ = [
    "OperationQuery",
    "PauseQuery",
    "PruneCounts",
    "Queries",
    "Tallies",
    "Tally",
    "TaskQuery",
    "TransitionQuery",
]

Key = tuple[float, str]
"""A keyset: the (time, id) sort key of the last row of the page before."""


@dataclass(frozen=True)
class TaskQuery:
    """A page of tasks, newest created first, with the filters operators need (all optional, combined with AND)."""

    status: str | None = None
    """``running`` or a terminal status."""
    reason: str | None = None
    """The reason of the task's outcome (``same_call``, ``model_budget``...)."""
    family: str | None = None
    """The task's family (:mod:`agents_loopguard.values.families`)."""
    prefix: str | None = None
    """Only task ids that start with this text."""
    updated_after: float | None = None
    """Only tasks last updated after this time (seconds since the epoch)."""
    updated_before: float | None = None
    """Only tasks last updated before this time."""
    after: Key | None = None
    """The (created_at, task_id) of the last task of the page before; None: the first page."""
    limit: int = 20


@dataclass(frozen=True)
class OperationQuery:
    """A page of the ledger, newest created first."""

    state: str | None = None
    """``unknown``, ``committed`` or ``not_committed``."""
    task_id: str | None = None
    prefix: str | None = None
    """Only operation ids that start with this text."""
    updated_after: float | None = None
    updated_before: float | None = None
    after: Key | None = None
    """The (created_at, operation_id) of the last operation of the page before."""
    limit: int = 20


@dataclass(frozen=True)
class PauseQuery:
    """A page of pauses, oldest first (the longest waiting first)."""

    status: str | None = None
    """``pending``, ``decided`` or ``resumed``."""
    task_id: str | None = None
    after: Key | None = None
    """The (created_at, pause_id) of the last pause of the page before."""
    limit: int = 20


@dataclass(frozen=True)
class TransitionQuery:
    """A page of the recorded operator transitions, newest first."""

    task_id: str | None = None
    kind: str | None = None
    """``resume``, ``recover``, ``reconcile``, ``confirm``, ``correct`` or ``stop``."""
    after: Key | None = None
    """The (at, transition_id) of the last transition of the page before."""
    limit: int = 20


@dataclass(frozen=True)
class Tally:
    """The tasks of one family, status and reason, with their budgets summed."""

    family: str
    status: str
    reason: str
    """The outcome's reason; empty for running tasks."""
    tasks: int
    models: int
    """Model turns used, summed."""
    model_turns: int
    """Model turns allowed, summed."""
    tools: int
    tool_executions: int


@dataclass(frozen=True)
class Tallies:
    """What the metrics export, read in bounded time (:meth:`Queries.tallies`)."""

    tasks: tuple[Tally, ...]
    refusals: tuple[tuple[str, str, int], ...]
    """(family, reason, count): calls refused before they ran, counted as they were recorded (a prune keeps them)."""
    pending_pauses: int
    oldest_pending_pause: float | None
    """When the oldest pending pause was created (None: none pending)."""
    unknown_operations: int
    oldest_unknown_operation: float | None
    """When the oldest write whose effect is unknown was reserved (None: none)."""


@dataclass(frozen=True)
class PruneCounts:
    """Rows a prune removed (or, for a dry run, would remove), by kind."""

    tasks: int = 0
    trace: int = 0
    repetitions: int = 0
    seen: int = 0
    tool_runs: int = 0
    steps: int = 0
    pauses: int = 0
    transitions: int = 0
    operations: int = 0
    activations: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(PruneCounts)))

    @property
    def total(self) -> int:
        """Every row counted."""
        return sum(getattr(self, f.name) for f in dataclasses.fields(PruneCounts))


class Queries(abc.ABC):
    """The bounded reads and the prune of a store (every :class:`~agents_loopguard.store.base.Store` has them)."""

    @abc.abstractmethod
    def task_page(self, query: TaskQuery) -> list[TaskSnapshot]:
        """At most ``query.limit`` tasks matching ``query``, newest created first, after ``query.after``."""

    @abc.abstractmethod
    def trace_page(self, task_id: str, *, before: int | None = None, limit: int = 50) -> list[TraceEntry]:
        """The task's last ``limit`` trace entries with a sequence number below ``before`` (None: the last ones),
        last first. Raises :class:`~agents_loopguard.NotFoundError` for an unknown task."""

    @abc.abstractmethod
    def operation_page(self, query: OperationQuery) -> list[OperationRecord]:
        """At most ``query.limit`` ledger operations matching ``query``, newest created first."""

    @abc.abstractmethod
    def pause_page(self, query: PauseQuery) -> list[PauseRecord]:
        """At most ``query.limit`` pauses matching ``query``, oldest first."""

    @abc.abstractmethod
    def transition_page(self, query: TransitionQuery) -> list[TransitionRecord]:
        """At most ``query.limit`` transitions matching ``query``, newest first."""

    @abc.abstractmethod
    def tallies(self) -> Tallies:
        """The figures of the metrics, in bounded time (see the module)."""

    @abc.abstractmethod
    def prune(
        self, *, finished_before: float, settled_before: float, limit: int = 500, dry_run: bool = False
    ) -> PruneCounts:
        """Delete one batch, in one short transaction: at most ``limit`` ended tasks last updated before
        ``finished_before`` (with their trace, repetitions, seen keys, tool counts, steps, pauses and transitions),
        neither running nor paused (a pending or decided pause) nor holding an ``unknown`` operation; at most
        ``limit`` ``committed`` or ``not_committed`` operations last updated before ``settled_before`` whose task is
        gone (pruned: a kept task keeps its ledger); at most ``limit`` activations created before ``settled_before``
        whose task is gone.
        Repeat until it removes nothing. ``dry_run``: count everything eligible now, remove nothing."""
