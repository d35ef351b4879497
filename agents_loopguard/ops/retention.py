"""Retention: what a store may forget, and the prune that forgets it in short batches (R22).

A :class:`RetentionPolicy` says how long finished history is kept. :func:`prune` removes, batch after batch:

- tasks that ended (completed, partial, stopped, needs_human, needs_reconciliation) and were last updated more than
  ``older_than_days`` ago, with their trace, repetition counts, seen cursors, per-tool counts, durable steps,
  pauses and transitions; never a running task, never a paused one (a pending or decided pause), never one that
  holds a write whose effect is ``unknown``;
- ``committed`` and ``not_committed`` operations last updated more than ``idempotency_days`` ago whose task is gone,
  and activations of workflows older than that whose task is gone; never an ``unknown`` operation.

The idempotency window is three times the prune age unless set, and never shorter than it: while a task is kept,
its operations are kept. What forgetting means:

- a **task id** run again after its task was pruned starts a new task with a fresh budget (within the prune age, a
  finished task returns its stored outcome and runs nothing);
- an **operation id** used again after its record was pruned is a new write: it is reserved and runs (within the
  window, a committed operation returns its stored result and never runs again). Keep the window longer than any
  retry, redelivery or replay of that business action can arrive.

Each batch is one short transaction (at most ``batch`` tasks), so workers keep running while a prune runs; counters
the metrics read (tallies, refusals) stay right. ``dry_run`` counts what would go and removes nothing.

>>> from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
>>> store = MemoryStore()
>>> old = Guard(budget=Budget(2, 2), store=store, task_id="old", clock=lambda: 0.0)
>>> _ = old.finish(Status.STOPPED, Reason.SAME_CALL)
>>> _ = Guard(budget=Budget(2, 2), store=store, task_id="live", clock=lambda: 0.0)
>>> prune(store, RetentionPolicy(older_than_days=30), now=40 * DAY)["removed"]["tasks"]
1
>>> [t.task_id for t in store.tasks()]
['live']
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..store.base import Store
from ..store.queries import PruneCounts
from ..values.errors import InputError
from .rows import iso_time
from .rows import now as clock

__all__ = ["DAY", "DEFAULT_BATCH", "WINDOW_FACTOR", "RetentionPolicy", "prune"]

DAY = 86_400.0
"""Seconds in a day."""
WINDOW_FACTOR = 3
"""The idempotency window, unless set: this many times the prune age."""
DEFAULT_BATCH = 500
"""Tasks removed per batch (one short transaction each)."""


@dataclass(frozen=True)
class RetentionPolicy:
    """How long finished history is kept (see the module)."""

    older_than_days: float = 30.0
    """Ended tasks last updated longer ago than this are removed with their rows."""
    idempotency_days: float | None = None
    """Settled operations (and activations) are removed this long after their last update, once their task is gone;
    None: :data:`WINDOW_FACTOR` times ``older_than_days``. Never shorter than ``older_than_days``."""

    def __post_init__(self) -> None:
        for name in ("older_than_days", "idempotency_days"):
            value = getattr(self, name)
            if value is None and name == "idempotency_days":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InputError(f"{name} must be a number of days >= 0, got {value!r}")
        if self.window_days < self.older_than_days:
            raise InputError(
                f"the idempotency window ({self.window_days:g} days) may not be shorter than the prune age "
                f"({self.older_than_days:g} days): a kept task keeps its operations, so a repeated write is answered "
                "from the ledger for as long as its task is"
            )

    @property
    def window_days(self) -> float:
        """The idempotency window in days."""
        if self.idempotency_days is not None:
            return float(self.idempotency_days)
        return float(self.older_than_days) * WINDOW_FACTOR


def prune(
    store: Store,
    policy: RetentionPolicy | None = None,
    *,
    now: float | None = None,
    batch: int = DEFAULT_BATCH,
    dry_run: bool = False,
    pause: float = 0.01,
    max_batches: int | None = None,
    on_batch: Callable[[PruneCounts], None] | None = None,
) -> dict[str, Any]:
    """Remove what ``policy`` allows, batch after batch until a batch removes nothing (or ``max_batches``);
    ``pause`` seconds between batches let waiting workers take the database first. Answers the policy, the cutoffs
    (ISO 8601), the rows ``removed`` (or, with ``dry_run``, that would be) by kind, and the number of ``batches``.
    For cron or a server's periodic task: ``prune(store, RetentionPolicy(older_than_days=30))``."""
    policy = policy or RetentionPolicy()
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch must be a whole number >= 1, got {batch!r}")
    moment = clock() if now is None else now
    finished_before = moment - policy.older_than_days * DAY
    settled_before = moment - policy.window_days * DAY
    total, batches = PruneCounts(), 0
    if dry_run:
        total = store.prune(finished_before=finished_before, settled_before=settled_before, dry_run=True)
    else:
        while max_batches is None or batches < max_batches:
            done = store.prune(finished_before=finished_before, settled_before=settled_before, limit=batch)
            if not done.total:
                break
            batches += 1
            total += done
            if on_batch is not None:
                on_batch(done)
            if pause:
                time.sleep(pause)
    return {
        "dry_run": dry_run,
        "older_than_days": policy.older_than_days,
        "idempotency_days": policy.window_days,
        "finished_before": iso_time(finished_before),
        "settled_before": iso_time(settled_before),
        "removed": dataclasses.asdict(total),
        "batches": batches,
    }
