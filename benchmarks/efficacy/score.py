"""What the runs come to: each trajectory judged by its label, and the figures over the corpus.

A loop is *cut* when the guard ended the run before the model gave up: a loop rule stopped it, a write's unknown
effect ended it for reconciliation, or the task was validated done while the model kept asking. A budget is no loop
rule: a loop that only the budget ends counts as missed (the corpus's budget is out of reach anyway). A legitimate
trajectory is *falsely stopped* when its run ends any other way than completed or with the model's own answer
(``partial``).

Executions wasted: tool bodies that ran from the first turn of the loop until the cut. Executions saved: bodies the
unguarded script would have run that the cut prevented. Both count real bodies (the world's), never the guard's
counters.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from agents_loopguard import Reason, Status

from .paths import Ran, unguarded

__all__ = ["Figures", "Judged", "figures", "judge", "table"]

BUDGET_REASONS = frozenset(
    {Reason.MODEL_BUDGET, Reason.TOOL_BUDGET, Reason.TOOL_LIMIT, Reason.MAX_TURNS, Reason.COST_BUDGET}
)


@dataclass(frozen=True)
class Judged:
    """One run, judged."""

    ran: Ran
    stopped: bool
    """The guard ended the run (for a loop: cut it; for legitimate work: a false stop)."""
    wasted: int
    """Loops: bodies that ran from the loop's first turn on."""
    saved: int
    """Loops: bodies the cut prevented."""

    @property
    def label(self) -> str:
        return self.ran.trajectory.label

    @property
    def reason(self) -> str:
        return f"{self.ran.outcome.status}/{self.ran.outcome.reason}"


def judge(ran: Ran) -> Judged:
    outcome = ran.outcome
    total, before = unguarded(ran.trajectory)
    if ran.trajectory.label == "loop":
        stopped = outcome.status is not Status.PARTIAL and outcome.reason not in BUDGET_REASONS
        return Judged(ran, stopped, max(0, ran.bodies - before), max(0, total - ran.bodies))
    stopped = outcome.status not in (Status.COMPLETED, Status.PARTIAL)
    return Judged(ran, stopped, 0, 0)


@dataclass(frozen=True)
class Figures:
    """The corpus's figures on one path."""

    trajectories: int
    loops: int
    legit: int
    cut: int
    false_stops: int
    wasted: list[int]
    saved: int

    @property
    def precision(self) -> float:
        flagged = self.cut + self.false_stops
        return self.cut / flagged if flagged else 1.0

    @property
    def recall(self) -> float:
        return self.cut / self.loops if self.loops else 1.0

    @property
    def false_stop_rate(self) -> float:
        return self.false_stops / self.legit if self.legit else 0.0

    def line(self) -> str:
        wasted = self.wasted or [0]
        return (
            f"precision {self.precision:.3f}  recall {self.recall:.3f}  false-stop rate {self.false_stop_rate:.3f}  "
            f"({self.cut}/{self.loops} loops cut, {self.false_stops}/{self.legit} legitimate stopped); "
            f"wasted before the cut: median {statistics.median(wasted):g}, mean {statistics.fmean(wasted):.1f}, "
            f"max {max(wasted)}; saved by the cuts: {self.saved}"
        )


def figures(judged: Iterable[Judged]) -> Figures:
    runs = list(judged)
    loops = [j for j in runs if j.label == "loop"]
    legit = [j for j in runs if j.label == "legit"]
    return Figures(
        trajectories=len(runs),
        loops=len(loops),
        legit=len(legit),
        cut=sum(j.stopped for j in loops),
        false_stops=sum(j.stopped for j in legit),
        wasted=[j.wasted for j in loops if j.stopped],
        saved=sum(j.saved for j in loops),
    )


def table(judged: Iterable[Judged]) -> str:
    """Per shape: how many, how many stopped, how ended, executions wasted (median, max) and saved."""
    by_shape: dict[tuple[str, str], list[Judged]] = defaultdict(list)
    for j in judged:
        by_shape[(j.label, j.ran.trajectory.shape)].append(j)
    lines = [f"{'label':<6} {'shape':<22} {'n':>4} {'stopped':>8} {'wasted med/max':>15} {'saved':>6}  ended as"]
    for (label, shape), runs in sorted(by_shape.items()):
        stopped = sum(j.stopped for j in runs)
        wasted = [j.wasted for j in runs if j.stopped] or [0]
        ends = Counter(j.reason for j in runs).most_common(3)
        lines.append(
            f"{label:<6} {shape:<22} {len(runs):>4} {stopped:>8} {statistics.median(wasted):>7g}/{max(wasted):<7}"
            f" {sum(j.saved for j in runs):>6}  " + ", ".join(f"{r} {n}" for r, n in ends)
        )
    return "\n".join(lines)
