"""The loop rules that read a task's recent calls: repeats and cycles, error storms, and shadow mode's count of the
store's own repetition rule.

The store keeps what must hold across workers and runs (a call's executions at one revision, the stall count, a
poll's wait, the cursors and records a listing showed). These rules read the calls this guard settled most recently,
with or without a ``verify``:

- *repeats*: a block of 1 to ``Policy.max_cycle`` calls that ran ``Policy.max_same_call`` times in a row, the last
  time without a new revision, is refused before it starts again (``same_call`` for one call, ``cycle`` for more).
  A call that advanced the revision has seen the new one once, so a stubborn identical call runs twice, not three
  times; a call that keeps advancing (a queue drained batch by batch) is never cut by it.
- *error storms*: ``Policy.max_failures`` transient failures of one tool among its last ``Policy.failure_window``
  executions end the task (``error_storm``). A transient failure is a retry, not a repeat: it is left out of the
  repeats.

Polls are left out of both the repeats (their wait policy bounds them) and nothing here reads the store.

>>> from agents_loopguard import Policy
>>> recent = Recent(Policy())
>>> search = Call("search", {"q": "refunds"})
>>> recent.settled(search, "fp-search", advanced=True, failed=False)
>>> recent.settled(search, "fp-search", advanced=False, failed=False)
>>> recent.repeat(search, "fp-search").reason
<Reason.SAME_CALL: 'same_call'>
"""

from __future__ import annotations

from collections import deque

from ..values.budget import Policy
from ..values.calls import Call, Verdict
from ..values.outcome import Reason, Status

__all__ = ["Recent"]

_MAX_TOOLS = 256
"""Tools whose recent failures are remembered (a task with more distinct tools forgets the oldest)."""


class Recent:
    """The calls one guard settled most recently, and the rules that read them (see the module)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.steps: deque[str] = deque(maxlen=max(1, policy.max_cycle * policy.max_same_call))
        """The fingerprints of the last settled executions (polls and transient failures left out)."""
        self.failures: dict[str, deque[bool]] = {}
        """tool -> its last ``failure_window`` executions, True for a transient failure."""
        self.counts: dict[str, tuple[int, int, float]] = {}
        """In shadow mode: fingerprint -> (revision, executions at it, first at), the store's repetition count."""
        self.quiet = 0
        """Executions at the end of :attr:`steps` without a new revision (0: the last one advanced it)."""

    def repeat(self, call: Call, fingerprint: str) -> Verdict | None:
        """The refusal of ``call`` when it would start again a block of calls that already ran ``max_same_call``
        times in a row, the last time without a new revision; None when it may run."""
        cycle, quiet = self.policy.max_cycle, self.quiet
        if not quiet or not cycle or call.kind == "poll":  # the last call advanced: no block ran without progress
            return None
        steps, passes = self.steps, self.policy.max_same_call
        needed = max(1, passes - 1)  # the last passes must have found nothing new
        count = len(steps)
        for period in range(1, min(cycle, quiet // needed) + 1):
            span = period * passes
            if span > count:
                return None
            if steps[count - period] != fingerprint:
                continue
            if all(steps[count - 1 - i] == steps[count - 1 - i - period] for i in range(span - period)):
                return _repeated(call, period, passes)
        return None

    def settled(self, call: Call, fingerprint: str, *, advanced: bool, failed: bool) -> Verdict | None:
        """Record one settled execution; the error-storm verdict when its tool failed too often."""
        window = self.failures.get(call.tool)
        if window is None:
            if len(self.failures) >= _MAX_TOOLS:
                self.failures.pop(next(iter(self.failures)))
            window = self.failures[call.tool] = deque(maxlen=self.policy.failure_window)
        window.append(failed)
        if not failed:
            if call.kind != "poll":
                self.steps.append(fingerprint)
                self.quiet = 0 if advanced else self.quiet + 1
            return None
        limit = self.policy.max_failures
        if limit and sum(window) >= limit:
            detail = (
                f"{call.tool}: {sum(window)} transient failures in its last {len(window)} executions "
                f"(Policy.max_failures={limit}, failure_window={self.policy.failure_window})"
            )
            return Verdict(Status.STOPPED, Reason.ERROR_STORM, detail)
        return None

    def would_refuse(
        self, fingerprint: str, revision: int, *, at: float, max_repeats: int, poll: bool, wait: float | None
    ) -> Reason | None:
        """Shadow mode's count of the store's repetition rule (the store itself is told no limit): ``same_call``, or
        ``wait_budget`` for a poll (``wait`` is its ``max_wait``), once this guard saw the fingerprint
        ``max_repeats`` times at ``revision``; counts the execution."""
        seen_revision, executions, first_at = self.counts.get(fingerprint, (revision, 0, at))
        if seen_revision != revision:
            executions, first_at = 0, at
        self.counts[fingerprint] = (revision, executions + 1, first_at)
        if len(self.counts) > 4096:
            self.counts.pop(next(iter(self.counts)))
        waited = poll and wait is not None and executions > 0 and at - first_at >= wait
        if waited or executions >= max_repeats:
            return Reason.WAIT_BUDGET if poll else Reason.SAME_CALL
        return None


def _repeated(call: Call, period: int, passes: int) -> Verdict:
    if period == 1:
        detail = (
            f"{call.tool}: the same call ran {passes} times in a row, the last without a new revision "
            f"(Policy.max_same_call={passes})"
        )
        return Verdict(Status.STOPPED, Reason.SAME_CALL, detail)
    detail = (
        f"{call.tool}: a cycle of {period} calls ran {passes} times in a row, the last time without a new revision "
        f"(Policy.max_cycle, max_same_call={passes})"
    )
    return Verdict(Status.STOPPED, Reason.CYCLE, detail)
