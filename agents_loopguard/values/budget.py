"""Limits of a task: model turns, tool executions, a deadline and an optional monetary budget.

The limits are the task's, not a run's: they span runs, resumes and workers, because the counters they bound live
in the store. Every counter is *reserved before* the call it pays for, and a call that then fails still counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_LIMIT", "TOKEN_LIMITS", "Budget", "Policy"]

MAX_LIMIT = 2**63 - 1
"""The largest count limit: what every store's 64-bit integer columns hold exactly (SQLite, PostgreSQL BIGINT)."""

TOKEN_LIMITS = ("input_tokens", "output_tokens", "total_tokens")
"""The token limits of a :class:`Budget` (reserved before a request, settled with the reported usage)."""


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_LIMIT


@dataclass(frozen=True)
class Budget:
    """The global budget of a task.

    >>> budget = Budget(model_turns=6, tool_executions=4, deadline=100.0, total_tokens=50_000)
    >>> budget.model_turns, budget.deadline, budget.total_tokens, budget.cost
    (6, 100.0, 50000, None)
    """

    model_turns: int
    """Model attempts allowed for the whole task (every attempt that leaves the process, retries included)."""
    tool_executions: int
    """Tool executions allowed for the whole task (every attempt, adapter retries included)."""
    deadline: float | None = None
    """Absolute time, on the guard's clock, after which nothing new starts (checked before and after executions)."""
    cost: float | None = None
    """Money allowed for the whole task, in the unit of the price table (``None``: no cost budget)."""
    input_tokens: int | None = None
    """Input tokens allowed for the whole task: each request reserves its estimate first, settled with the usage."""
    output_tokens: int | None = None
    """Output tokens allowed for the whole task: each request reserves its output bound first."""
    total_tokens: int | None = None
    """Input and output tokens together."""

    def __post_init__(self) -> None:
        for name in ("model_turns", "tool_executions"):
            value = getattr(self, name)
            if not _is_count(value):
                raise ValueError(f"Budget.{name} must be an int from 0 to {MAX_LIMIT}, got {value!r}")
        for name in TOKEN_LIMITS:
            value = getattr(self, name)
            if value is not None and not _is_count(value):
                raise ValueError(f"Budget.{name} must be an int from 0 to {MAX_LIMIT} or None, got {value!r}")
        if self.deadline is not None and (isinstance(self.deadline, bool) or not math.isfinite(self.deadline)):
            raise ValueError(f"Budget.deadline must be a finite number or None, got {self.deadline!r}")
        if self.cost is not None and (not math.isfinite(self.cost) or self.cost < 0):
            raise ValueError(f"Budget.cost must be a non-negative finite number or None, got {self.cost!r}")

    def extended(self, delta: Mapping[str, Any]) -> Budget:
        """The budget after an explicit, recorded extension: counts and cost are added, a deadline is replaced.

        Limits only grow; counters are not part of a budget, so an extension never resets them.

        >>> Budget(model_turns=6, tool_executions=4).extended({"model_turns": 2}).model_turns
        8
        """
        unknown = set(delta) - {"model_turns", "tool_executions", "cost", "deadline", *TOKEN_LIMITS}
        if unknown:
            raise ValueError(f"budget extension has unknown keys {sorted(unknown)}")
        for key in ("model_turns", "tool_executions", "cost", *TOKEN_LIMITS):
            value = delta.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"budget extension {key!r} must be a non-negative finite number (limits only grow)")
        if "cost" in delta:
            cost: float | None = (self.cost or 0.0) + float(delta["cost"])
        else:
            cost = self.cost
        tokens = {
            name: (getattr(self, name) or 0) + int(delta[name]) if name in delta else getattr(self, name)
            for name in TOKEN_LIMITS
        }
        return Budget(
            model_turns=self.model_turns + int(delta.get("model_turns", 0)),
            tool_executions=self.tool_executions + int(delta.get("tool_executions", 0)),
            deadline=delta.get("deadline", self.deadline),
            cost=cost,
            **tokens,
        )

    def expired(self, now: float) -> bool:
        """True when ``now`` is at or past the deadline."""
        return self.deadline is not None and now >= self.deadline


@dataclass(frozen=True)
class Policy:
    """Thresholds of the progress rules. The defaults are the article's demonstration values; choose yours from
    correct trajectories and the risk of each tool.

    >>> Policy().max_same_call, Policy().max_stalled
    (2, 3)
    """

    max_same_call: int = 2
    """Executions allowed for one fingerprint at one revision; the next is ``stopped/same_call``."""
    max_stalled: int = 3
    """Verified results in a row without the revision advancing; reaching it is ``stopped/no_progress``."""
    max_polls: int = 10
    """Polls of one job (one fingerprint at one revision) while it answers pending; the next is ``wait_budget``."""
    max_wait: float | None = None
    """Seconds a job may stay pending, from its first poll; after that a poll is ``stopped/wait_budget``."""
    max_unverified: int = 16
    """Executions in a row that nobody verified (tools without ``verify``); reaching it is ``stopped/no_progress``.
    They prove no progress but are not stalls: a drop-in app's different reads are not cut after three."""

    def __post_init__(self) -> None:
        for name in ("max_same_call", "max_stalled", "max_polls", "max_unverified"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Policy.{name} must be an int >= 1, got {value!r}")
        if self.max_wait is not None and not (math.isfinite(self.max_wait) and self.max_wait >= 0):
            raise ValueError(f"Policy.max_wait must be a non-negative number or None, got {self.max_wait!r}")
