"""The figures operators watch, in bounded time and with bounded labels (R22): what ``GET /metrics`` exports.

:func:`measures` asks the store for its tallies (:meth:`~agents_loopguard.store.queries.Queries.tallies`: counters the
store keeps as tasks end, never a read of every task or trace) and answers plain data whose every label comes from a
bounded set: the task's family (:mod:`agents_loopguard.values.families`; at most :data:`MAX_FAMILIES`, the smaller
ones summed as ``other``), its status and the reason of its outcome (the guard's own codes). No task id, argument or
free text is ever a label.

>>> from agents_loopguard import Budget, Guard, MemoryStore
>>> store = MemoryStore()
>>> _ = Guard(budget=Budget(4, 2), store=store, task_id="ticket-981")
>>> figures = measures(store, now=0.0)
>>> [(g["family"], g["status"], g["tasks"], g["model_turns"]) for g in figures["tasks"]], figures["pauses"]["pending"]
([('ticket', 'running', 1, 4)], 0)
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..store.base import Store
from ..values.families import FAMILY_OTHER, MAX_FAMILIES
from ..values.outcome import Reason, Status
from .rows import now as clock

__all__ = ["MAX_FAMILIES", "measures", "pending_count"]

_FAMILY = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_STATUSES = {"running", *(str(s) for s in Status)}
_REASONS = {"", *(str(r) for r in Reason)}
_SHADOW = "shadow:"
_SUMS = ("tasks", "models", "model_turns", "tools", "tool_executions")


def _label(value: str, allowed: set[str]) -> str:
    return value if value in allowed else FAMILY_OTHER


def _families(weights: Counter[str], limit: int) -> set[str]:
    """The families that keep their own label: the ``limit`` largest (one less when the rest is summed as other)."""
    named = [f for f in weights if f != FAMILY_OTHER and _FAMILY.fullmatch(f)]
    if len(named) <= limit:
        return set(named)
    return {f for f, _ in Counter({f: weights[f] for f in named}).most_common(max(0, limit - 1))}


def measures(store: Store, *, now: float | None = None, max_families: int = MAX_FAMILIES) -> dict[str, Any]:
    """The metrics' figures: ``tasks`` (by family, status and reason, with model turns and tool executions used and
    allowed summed), ``refusals`` (by family and rule, a counter that a prune leaves), ``shadow_verdicts`` (what the
    loop rules would have refused in shadow mode, counted the same way), ``pauses`` (pending, and the
    oldest one's age in seconds) and ``unknown_writes`` (writes whose effect is unknown, and the oldest one's age)."""
    tallies = store.tallies()
    moment = clock() if now is None else now
    weights: Counter[str] = Counter()
    for group in tallies.tasks:
        weights[group.family] += group.tasks
    for family, _, _ in tallies.refusals:  # a family whose tasks were pruned keeps its refusal counter's label
        weights[family] += 0
    kept = _families(weights, max_families)
    tasks: dict[tuple[str, str, str], list[int]] = {}
    for group in tallies.tasks:
        key = (
            group.family if group.family in kept else FAMILY_OTHER,
            _label(group.status, _STATUSES),
            _label(group.reason, _REASONS),
        )
        sums = tasks.setdefault(key, [0] * len(_SUMS))
        for i, name in enumerate(_SUMS):
            sums[i] += getattr(group, name)
    refusals: Counter[tuple[str, str]] = Counter()
    shadowed: Counter[tuple[str, str]] = Counter()
    for family, reason, count in tallies.refusals:  # a shadow verdict is counted as ``shadow:<rule>``
        rule = reason.removeprefix(_SHADOW)
        counter = shadowed if reason.startswith(_SHADOW) else refusals
        counter[(family if family in kept else FAMILY_OTHER, _label(rule, _REASONS))] += count
    return {
        "tasks": [
            {"family": f, "status": s, "reason": r, **dict(zip(_SUMS, sums, strict=True))}
            for (f, s, r), sums in sorted(tasks.items())
        ],
        "refusals": [{"family": f, "reason": r, "count": n} for (f, r), n in sorted(refusals.items())],
        "shadow_verdicts": [{"family": f, "reason": r, "count": n} for (f, r), n in sorted(shadowed.items())],
        "pauses": {"pending": tallies.pending_pauses, "oldest_age_seconds": _age(tallies.oldest_pending_pause, moment)},
        "unknown_writes": {
            "count": tallies.unknown_operations,
            "oldest_age_seconds": _age(tallies.oldest_unknown_operation, moment),
        },
    }


def _age(since: float | None, moment: float) -> float:
    return max(0.0, moment - since) if since else 0.0


def pending_count(store: Store) -> int:
    """How many pauses wait for a decision (read through the store's index, not by listing them)."""
    return store.tallies().pending_pauses
