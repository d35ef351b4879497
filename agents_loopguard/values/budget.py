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
    """Thresholds of the loop rules. The defaults are measured on a labelled corpus of loops and legitimate work
    (``benchmarks/efficacy``, docs/efficacy.md): tune yours on your own correct runs (``loopguard tune``).

    >>> Policy().max_same_call, Policy().max_stalled, Policy().max_wait
    (2, 3, 600.0)
    >>> Policy.prototype().max_cycle, Policy(shadow=("orders",)).shadows("orders")
    (0, True)
    """

    max_same_call: int = 2
    """Executions allowed for one call (the same fingerprint) at one revision; the next is ``stopped/same_call``. A
    call that advanced the revision already looked at the new one: an identical call right after it is its second
    look (with ``max_cycle``), so a stubborn identical call runs twice, never three times."""
    max_stalled: int = 3
    """Verified results in a row without the revision advancing; reaching it is ``stopped/no_progress``."""
    max_polls: int = 120
    """Polls of one job (one fingerprint at one revision) while it answers pending; the next is ``wait_budget``. A
    bound for polls in a tight loop: ``max_wait`` bounds them first."""
    max_wait: float | None = 600.0
    """Seconds a job may stay pending, from its first poll; after that a poll is ``stopped/wait_budget``."""
    max_unverified: int = 64
    """Executions in a row that nobody verified (tools without ``verify``); reaching it is ``stopped/no_progress``.
    A backstop for a model that keeps changing the arguments of unverified reads: their repeats and cycles are cut
    by the repeat rules (``max_same_call``, ``max_cycle``) long before it."""
    max_cycle: int = 4
    """The longest cycle of calls the repeat rule looks for in the recent calls (1: only the same call back to
    back): a block of calls repeated ``max_same_call`` times, the last time without a new revision, is cut before
    it starts again (``stopped/cycle``; ``stopped/same_call`` for one call). 0 turns the rule off."""
    max_failures: int = 5
    """Transient failures of one tool among its last ``failure_window`` executions that end the task with
    ``stopped/error_storm``. 0 turns the rule off."""
    failure_window: int = 5
    """The executions of one tool ``max_failures`` is counted over (the default: that many failures in a row)."""
    retry_transient: bool = True
    """A transient failure without effect (a ``retryable`` result, effect none or not_committed) is a retry: no
    stall, and its call may run again at the same revision; ``max_failures`` bounds them. False: the article's
    prototype's rule, where it counts as a stall and as a repetition like any result."""
    max_probes: int = 2
    """Probes of the receiver about one write whose answer was lost (a tool's ``probe``, R20), each reserved like a
    tool execution; one that answers ``unknown`` or fails is asked again up to this many times. 0: never probe."""
    task_revision: bool = False
    """False (the default): each tool's ``verify`` reports the revision of its own progress key (the tool's name, or
    the ``progress_key`` it declares), compared only with that key's last one, so independent verifies compose. True:
    the article's one revision for the whole task, which every verify without a ``progress_key`` reports (it must
    know what every other tool counted). See :mod:`~agents_loopguard.engine.progress`."""
    shadow: bool | tuple[str, ...] = False
    """Shadow mode: every loop rule is evaluated and each would-be verdict recorded (the trace, ``loopguard show``,
    the console, the metrics), and nothing is refused for it. True for every task, or the task families it names
    (:mod:`~agents_loopguard.values.families`); ``LOOPGUARD_SHADOW`` (``all`` or families, comma-separated) adds to
    it. Budgets, the deadline, the stop mark, the ledger and invalid input are never shadowed."""

    def __post_init__(self) -> None:
        for name in ("max_same_call", "max_stalled", "max_polls", "max_unverified", "failure_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Policy.{name} must be an int >= 1, got {value!r}")
        for name in ("max_cycle", "max_failures", "max_probes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Policy.{name} must be an int >= 0 (0: off), got {value!r}")
        if self.max_wait is not None and not (math.isfinite(self.max_wait) and self.max_wait >= 0):
            raise ValueError(f"Policy.max_wait must be a non-negative number or None, got {self.max_wait!r}")
        for name in ("retry_transient", "task_revision"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Policy.{name} must be a bool, got {getattr(self, name)!r}")
        shadow = self.shadow
        if isinstance(shadow, list):
            object.__setattr__(self, "shadow", shadow := tuple(shadow))
        if not isinstance(shadow, bool) and not (
            isinstance(shadow, tuple) and all(isinstance(f, str) and f for f in shadow)
        ):
            raise ValueError(f"Policy.shadow must be a bool or a tuple of task families, got {shadow!r}")

    @classmethod
    def prototype(cls) -> Policy:
        """The article's prototype's rules, exactly: two executions per call and revision, three results without
        progress, no cycle or error-storm rule, a transient failure counted like any result, one revision for the
        whole task.

        >>> Policy.prototype().retry_transient, Policy.prototype().task_revision
        (False, True)
        """
        return cls(
            max_same_call=2, max_stalled=3, max_cycle=0, max_failures=0, retry_transient=False, task_revision=True
        )

    def shadows(self, family: str, environment: str | None = None) -> bool:
        """True when the loop rules only record their verdicts for a task of ``family`` (the task's family,
        :mod:`~agents_loopguard.values.families`; see :attr:`shadow`); ``environment`` is ``LOOPGUARD_SHADOW``'s value.

        >>> Policy().shadows("ticket", "all"), Policy().shadows("ticket", "orders, ticket"), Policy().shadows("x")
        (True, True, False)
        """
        if self.shadow is True:
            return True
        families = set(self.shadow or ())
        if environment:
            names = {name.strip() for name in environment.split(",") if name.strip()}
            if names & {"all", "*"}:
                return True
            families |= names
        return bool(families) and family in families
