"""The loop rules after a result, and shadow mode: a part of :class:`~agents_loopguard.Guard` (these methods are the
guard's); the call cycle itself is in :mod:`~agents_loopguard.engine.core`, the rules that read the recent calls in
:mod:`~agents_loopguard.engine.detectors`.

After a result the loop rules are, in order: an error storm (one tool failing transiently again and again), a
pagination cycle (a cursor, or every record of a page, seen before), and no progress (too many unverified executions,
or verified results without a new revision, in a row). Before a call: the repeat rule (the same call or a cycle of
calls without progress) and the store's repetition rule (a call's executions at one revision, a poll's wait).

In shadow mode (:attr:`~agents_loopguard.values.budget.Policy.shadow`) every loop rule is evaluated and its verdict
recorded as a would-be verdict: a ``shadow:<reason>`` trace entry (which ``loopguard show``, the console and the
metrics read), a ``call.shadowed`` observer event and a log record; the call goes on. Shadow mode never relaxes the
rest: the budgets (turns, executions, a tool's own limit, tokens, money), the deadline, the stop mark, the write
ledger (an operation still runs at most once; an unknown one still needs reconciliation), invalid calls, results and
evidence, fatal results, approvals, a trigger chain's depth.

>>> from agents_loopguard import Budget, Guard, MemoryStore, Policy
>>> store = MemoryStore()
>>> guard = Guard(budget=Budget(9, 9), store=store, task_id="t-shadow", policy=Policy(shadow=True))
>>> for _ in range(3):
...     ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": "refunds"}})
...     guard.settle(ticket, {"status": "ok"}, evidence={"revision": 0, "done": False, "effect": "none"})
>>> [e.result_class for e in store.trace("t-shadow")]
['ok', 'ok', 'shadow:same_call', 'ok', 'shadow:no_progress']
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..store.base import Progress, Store, TraceEntry
from ..values.budget import Policy
from ..values.calls import Call, Ticket, Verdict
from ..values.evidence import Effect, Evidence, ResultStatus
from ..values.outcome import LOOP_REASONS, Reason, Status
from .detectors import Recent

__all__ = ["LoopRules", "transient"]

logger = logging.getLogger("agents_loopguard")
_NO_EFFECT = frozenset({Effect.NONE, Effect.NOT_COMMITTED})


def transient(status: ResultStatus, proof: Evidence) -> bool:
    """A transient failure without effect: a retryable result whose effect is none or not_committed.

    >>> transient(ResultStatus.RETRYABLE, Evidence(revision=0, done=False))
    True
    """
    return status is ResultStatus.RETRYABLE and proof.effect in _NO_EFFECT


class LoopRules:
    """The loop rules after a result, and shadow mode's record of every loop rule (a part of the guard)."""

    task_id: str
    store: Store
    policy: Policy
    revision: int
    recent: Recent
    shadow: bool
    _unverified: int
    _transient: dict[str, int]

    if TYPE_CHECKING:  # the guard's own (core)

        def _now(self) -> float: ...
        def _observe(self, event: str, **data: Any) -> None: ...
        def _trace(
            self, call: Call | None, result_class: str, *, at: float, fp: str | None = None, state: str | None = None
        ) -> TraceEntry: ...

    def _loop_rules(
        self, ticket: Ticket, proof: Evidence, progress: Progress, *, failed: bool, advanced: bool
    ) -> Verdict | None:
        """The loop rules on a recorded result (an error storm, a pagination cycle, no progress), ``advanced`` when
        the result moved its own progress key: the first verdict, enforced; in shadow mode each one recorded, and
        ``None``."""
        call = ticket.call
        if failed:  # a transient failure without effect: one more run of the call is allowed (see authorize)
            key = f"{ticket.fingerprint}@{self.revision}"
            self._transient[key] = self._transient.get(key, 0) + 1
        self._unverified = 0 if proof.verified else self._unverified + 1
        storm = self.recent.settled(call, ticket.fingerprint, advanced=advanced, failed=failed)
        cycle = _page_cycle(proof, progress) if call.kind == "page" else None
        stall = self._stalled(progress)
        if storm is None and cycle is None and stall is None:
            return None
        for verdict in (storm, cycle, stall):
            if verdict is not None and self._loop_verdict(call, verdict, at=self._now(), fp=ticket.fingerprint):
                return verdict
        return None

    def _stalled(self, progress: Progress) -> Verdict | None:
        """``no_progress``: too many unverified executions, or verified results without a new revision, in a row."""
        if self._unverified >= self.policy.max_unverified:
            return Verdict(
                Status.STOPPED,
                Reason.NO_PROGRESS,
                f"{self._unverified} executions in a row that no verify checked (Policy.max_unverified)",
            )
        if progress.stalled >= self.policy.max_stalled:
            return Verdict(
                Status.STOPPED,
                Reason.NO_PROGRESS,
                f"{progress.stalled} verified results in a row without the revision advancing",
            )
        return None

    def _loop_verdict(self, call: Call, verdict: Verdict, *, at: float, fp: str | None) -> Verdict | None:
        """A loop rule's verdict, enforced; in shadow mode recorded as a would-be verdict and ``None`` (the call goes
        on). A verdict of any other rule is always enforced."""
        if not self.shadow or verdict.reason not in LOOP_REASONS:
            return verdict
        self.store.append_trace(self.task_id, self._trace(call, f"shadow:{verdict.reason}", at=at, fp=fp))
        self._observe("call.shadowed", tool=call.tool, status=str(verdict.status), reason=str(verdict.reason))
        logger.info(
            "task %s: shadow mode: %s would have been %s/%s: %s",
            self.task_id,
            call.tool,
            verdict.status,
            verdict.reason,
            verdict.detail,
            extra={"task_id": self.task_id, "reason": str(verdict.reason), "status": "shadow", "tool": call.tool},
        )
        return None

    def _shadow_repeat(
        self, call: Call, fp: str, *, at: float, max_repeats: int, max_wait: float | None, record: bool = True
    ) -> None:
        """In shadow mode: the store's repetition rule (same_call, a poll's wait_budget), counted by this guard;
        its would-be verdict recorded unless ``record`` is False (the repeat rule already recorded one for the
        call: one would-be refusal per call)."""
        poll = call.kind == "poll"
        reason = self.recent.would_refuse(fp, self.revision, at=at, max_repeats=max_repeats, poll=poll, wait=max_wait)
        if reason is not None and record:
            detail = f"{call.tool}: ran {max_repeats} times at revision {self.revision}, or waited past max_wait"
            self._loop_verdict(call, Verdict(Status.STOPPED, reason, detail), at=at, fp=fp)


def _page_cycle(proof: Evidence, progress: Progress) -> Verdict | None:
    """A page whose cursor, or every record, was seen before is a cycle (R9)."""
    cursor_seen = bool(proof.cursor is not None and progress.seen_before and progress.seen_before[0])
    record_flags = progress.seen_before[1:] if proof.cursor is not None else progress.seen_before
    if cursor_seen:
        return Verdict(Status.STOPPED, Reason.CURSOR_CYCLE, f"cursor {proof.cursor!r} was seen before")
    if record_flags and all(record_flags):
        return Verdict(Status.STOPPED, Reason.CURSOR_CYCLE, "every record on this page was seen before")
    return None
