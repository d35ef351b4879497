"""The operators' pages, the metrics' tallies and the prune of a :class:`~agents_loopguard.store.memory.MemoryStore`.

A memory store lives in one process and holds what that process made, so these read its dicts under its lock (a
page sorts what matches; the SQL store reads the same pages through indexes). The answers are the same as
:class:`~agents_loopguard.store.sql.SQLStore`'s for the same steps (the store contract tests run on both).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from itertools import islice
from typing import Any, TypeVar

from .base import OperationRecord, OperationState, PauseRecord, TaskSnapshot, TraceEntry, TransitionRecord
from .queries import (
    Key,
    OperationQuery,
    PauseQuery,
    PruneCounts,
    Queries,
    Tallies,
    Tally,
    TaskQuery,
    TransitionQuery,
)
from .records import REOPENED
from .rules import unknown_task

__all__ = ["MemoryQueries"]

T = TypeVar("T")
OPEN_PAUSES = ("pending", "decided")
"""A task with a pause in one of these states is paused: a prune never removes it."""


def _page(rows: Iterable[T], key: Callable[[T], Key], after: Key | None, limit: int, *, newest: bool) -> list[T]:
    """The rows after the keyset ``after`` in the order of ``key`` (descending when ``newest``), at most ``limit``."""
    ordered = sorted(rows, key=key, reverse=newest)
    if after is not None:
        ordered = [r for r in ordered if (key(r) < after if newest else key(r) > after)]
    return ordered[: max(0, limit)]


def _in_window(at: float, after: float | None, before: float | None) -> bool:
    return (after is None or at > after) and (before is None or at < before)


class MemoryQueries(Queries):
    """:class:`~agents_loopguard.store.queries.Queries` over the memory store's dicts (a mixin of MemoryStore)."""

    _lock: threading.RLock
    _tasks: dict[str, Any]
    _operations: dict[str, OperationRecord]
    _pauses: dict[str, PauseRecord]
    _transitions: list[TransitionRecord]
    _activations: dict[str, Any]
    _steps: dict[tuple[str, str], Any]
    _pruned_refusals: dict[tuple[str, str], int]
    _activation_times: dict[str, float]

    def task_page(self, query: TaskQuery) -> list[TaskSnapshot]:
        def matches(task: Any) -> bool:
            reason = REOPENED if task.reopened else (task.outcome or {}).get("reason")  # as the SQL store keeps it
            return (
                (query.status is None or task.status == query.status)
                and (query.reason is None or reason == query.reason)
                and (query.family is None or task.family == query.family)
                and (query.prefix is None or task.task_id.startswith(query.prefix))
                and _in_window(task.updated_at, query.updated_after, query.updated_before)
            )

        with self._lock:
            found = [t for t in self._tasks.values() if matches(t)]
            page = _page(found, lambda t: (t.created_at, t.task_id), query.after, query.limit, newest=True)
            return [t.snapshot() for t in page]

    def trace_page(self, task_id: str, *, before: int | None = None, limit: int = 50) -> list[TraceEntry]:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                raise unknown_task(task_id)
            last = task.traced
            numbered = (replace(e, seq=last - i) for i, e in enumerate(reversed(task.trace)))
            return list(islice((e for e in numbered if before is None or e.seq < before), max(0, limit)))

    def operation_page(self, query: OperationQuery) -> list[OperationRecord]:
        def matches(op: OperationRecord) -> bool:
            return (
                (query.state is None or str(op.state) == query.state)
                and (query.task_id is None or op.task_id == query.task_id)
                and (query.prefix is None or op.operation_id.startswith(query.prefix))
                and _in_window(op.updated_at, query.updated_after, query.updated_before)
            )

        with self._lock:
            found = [o for o in self._operations.values() if matches(o)]
            return _page(found, lambda o: (o.created_at, o.operation_id), query.after, query.limit, newest=True)

    def pause_page(self, query: PauseQuery) -> list[PauseRecord]:
        with self._lock:
            found = [
                p
                for p in self._pauses.values()
                if (query.status is None or p.status == query.status)
                and (query.task_id is None or p.task_id == query.task_id)
            ]
            return _page(found, lambda p: (p.created_at, p.pause_id), query.after, query.limit, newest=False)

    def transition_page(self, query: TransitionQuery) -> list[TransitionRecord]:
        with self._lock:
            found = [
                t
                for t in self._transitions
                if (query.task_id is None or t.task_id == query.task_id)
                and (query.kind is None or t.kind == query.kind)
            ]
            return _page(found, lambda t: (t.at, t.transition_id), query.after, query.limit, newest=True)

    # --- metrics --------------------------------------------------------------------------------------------------

    def tallies(self) -> Tallies:
        with self._lock:
            groups: dict[tuple[str, str, str], list[int]] = {}
            refusals = dict(self._pruned_refusals)
            for task in self._tasks.values():
                reason = "" if task.status == "running" else str((task.outcome or {}).get("reason") or "")
                sums = groups.setdefault((task.family, task.status, reason), [0, 0, 0, 0, 0])
                for i, value in enumerate(
                    (1, task.models, task.budget.model_turns, task.tools, task.budget.tool_executions)
                ):
                    sums[i] += value
                for why, count in task.refused.items():
                    refusals[(task.family, why)] = refusals.get((task.family, why), 0) + count
            pending = [p.created_at for p in self._pauses.values() if p.status == "pending"]
            unknown = [o.created_at for o in self._operations.values() if o.state is OperationState.UNKNOWN]
        return Tallies(
            tasks=tuple(Tally(*key, *sums) for key, sums in sorted(groups.items())),
            refusals=tuple((family, why, count) for (family, why), count in sorted(refusals.items())),
            pending_pauses=len(pending),
            oldest_pending_pause=min(pending, default=None),
            unknown_operations=len(unknown),
            oldest_unknown_operation=min(unknown, default=None),
        )

    # --- retention ------------------------------------------------------------------------------------------------

    def _prunable(self, task: Any, finished_before: float) -> bool:
        if task.status == "running" or task.updated_at >= finished_before:
            return False
        tid = task.task_id
        if any(p.task_id == tid and p.status in OPEN_PAUSES for p in self._pauses.values()):
            return False
        return not any(o.task_id == tid and o.state is OperationState.UNKNOWN for o in self._operations.values())

    def prune(
        self, *, finished_before: float, settled_before: float, limit: int = 500, dry_run: bool = False
    ) -> PruneCounts:
        with self._lock:
            oldest = sorted(self._tasks.values(), key=lambda t: (t.created_at, t.task_id))
            tasks = [t for t in oldest if self._prunable(t, finished_before)]
            if not dry_run:
                tasks = tasks[:limit]
            gone = {t.task_id for t in tasks}
            counts = PruneCounts(
                tasks=len(tasks),
                trace=sum(len(t.trace) for t in tasks),
                repetitions=sum(len(t.repeats) for t in tasks),
                seen=sum(len(t.seen) for t in tasks),
                tool_runs=sum(len(t.tool_runs) for t in tasks),
                steps=sum(1 for key in self._steps if key[0] in gone),
                pauses=sum(1 for p in self._pauses.values() if p.task_id in gone),
                transitions=sum(1 for t in self._transitions if t.task_id in gone),
            )
            kept = set(self._tasks) - gone

            def settled(op: OperationRecord) -> bool:
                old = op.state is not OperationState.UNKNOWN and op.updated_at < settled_before
                return old and op.task_id not in kept

            ops = [o.operation_id for o in self._operations.values() if settled(o)]
            acts = [a for a, row in self._activations.items() if row.activation_id not in kept]
            acts = [a for a in acts if self._activation_times.get(a, 0.0) < settled_before]
            if not dry_run:
                ops, acts = ops[:limit], acts[:limit]
            counts = PruneCounts(**{**vars(counts), "operations": len(ops), "activations": len(acts)})
            if not dry_run:
                self._remove(tasks, ops, acts)
            return counts

    def _remove(self, tasks: list[Any], ops: list[str], acts: list[str]) -> None:
        gone = {t.task_id for t in tasks}
        for task in tasks:
            for why, count in task.refused.items():
                key = (task.family, why)
                self._pruned_refusals[key] = self._pruned_refusals.get(key, 0) + count
            del self._tasks[task.task_id]
        for key in [k for k in self._steps if k[0] in gone]:
            del self._steps[key]
        for pause_id in [p.pause_id for p in self._pauses.values() if p.task_id in gone]:
            del self._pauses[pause_id]
        self._transitions[:] = [t for t in self._transitions if t.task_id not in gone]
        for operation_id in ops:
            del self._operations[operation_id]
        for activation_id in acts:
            del self._activations[activation_id]
            self._activation_times.pop(activation_id, None)
