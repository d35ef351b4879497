"""Thresholds from stored traces (``loopguard tune``), and the operator's label on a task (``loopguard label``).

The stored trace of a finished task holds what its loop rules read: each execution's tool, call fingerprint, result
class (``ok``, ``unverified``, ``pending``, ``retryable``, ``cached``), the revision it was made at and when, and a
refused proposal's rule. :func:`tune` replays those executions through a real :class:`~agents_loopguard.Guard`
(with a memory store, the recorded results and revisions as evidence) under candidate thresholds, one rule at a time
from ``Policy()``, and reports for each candidate the false stops it would have caused on legitimate work and how
much earlier it would have cut the loops; then the :class:`~agents_loopguard.Policy` that cuts loops earliest
without more false stops than allowed.

Which tasks count as what: the operator's latest label (:func:`label_task`: ``correct`` or ``loop``) first; without
one, a task the guard stopped with a loop rule is a loop and a completed or ``partial`` task is legitimate work
(with ``correct_only``, only labelled ``correct`` tasks are). A task stopped any other way (a budget, a fatal
result, a write to reconcile) is left out: its trace says nothing either way.

>>> from agents_loopguard import Budget, MemoryStore, create_runner
>>> store = MemoryStore()
>>> run = create_runner(budget=Budget(9, 9), store=store, task_id="search-1", now=lambda: 0,
...                     execute=lambda c: {"status": "ok"},
...                     verify=lambda c, r: {"revision": 0, "done": False, "effect": "none"})
>>> run([{"tool": "search", "kind": "read", "args": {"q": "refunds"}}] * 5).reason
<Reason.SAME_CALL: 'same_call'>
>>> report = tune(store)
>>> report["scope"]["loops"], [c["earlier"] for c in report["rules"]["max_same_call"]["candidates"]]
(1, [1, 0, 0, 0])
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine.core import Guard
from ..engine.progress import TASK_KEY
from ..store.base import Store, TaskSnapshot, TraceEntry, operator_text
from ..store.memory import MemoryStore
from ..store.queries import TaskQuery, TransitionQuery
from ..values.budget import MAX_LIMIT, Budget, Policy
from ..values.calls import Call, Verdict
from ..values.errors import InputError
from ..values.evidence import UNVERIFIED
from ..values.outcome import LOOP_REASONS, Reason, Status

__all__ = ["CANDIDATES", "LABELS", "label_task", "parse_when", "render", "tune"]

LABELS = ("correct", "loop")
"""An operator's labels: ``correct`` (legitimate work the guard should let run), ``loop`` (a loop it should cut)."""
CANDIDATES: dict[str, tuple[Any, ...]] = {
    "max_same_call": (1, 2, 3, 4),
    "max_stalled": (2, 3, 4, 5, 6, 8),
    "max_cycle": (0, 1, 2, 3, 4, 6),
    "max_failures": (0, 3, 4, 5, 6, 8),
    "max_unverified": (8, 16, 32, 64, 128),
    "max_polls": (10, 30, 60, 120, 240),
    "max_wait": (60.0, 300.0, 600.0, 1800.0, 3600.0, None),
}
"""The values each rule is replayed with (0 or None: the rule off)."""
_EXECUTED = frozenset({"ok", "unverified", "pending", "retryable", "cached"})
_UNBOUNDED = Budget(model_turns=MAX_LIMIT, tool_executions=MAX_LIMIT)
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


# --- labels -----------------------------------------------------------------------------------------------------------


def label_task(store: Store, task_id: str, label: str, *, who: str, why: str = "") -> dict[str, Any]:
    """Record an operator's label on a task (``correct`` or ``loop``), redacted like every operator text.

    >>> from agents_loopguard import Budget, Guard, MemoryStore
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(1, 1), store=store, task_id="t-1")
    >>> label_task(store, "t-1", "correct", who="ana", why="token=abc123 reviewed")["why"]
    'token=[redacted] reviewed'
    """
    if label not in LABELS:
        raise InputError(f"label {label!r} is not one of {', '.join(LABELS)}")
    if not who.strip():
        raise InputError("a label needs who gives it (--who)")
    transition = store.label_task(task_id, label, who=operator_text(who), why=operator_text(why), now=time.time())
    return {"task_id": task_id, "label": label, "who": transition.who, "why": transition.why, "at": transition.at}


def parse_when(text: str, *, now: float | None = None) -> float:
    """A point in time for ``--since``/``--until``: ISO 8601 (UTC unless it says otherwise) or a duration before
    now (``30m``, ``12h``, ``7d``).

    >>> parse_when("2026-11-04T10:00:00Z"), parse_when("2d", now=200_000.0)
    (1793786400.0, 27200.0)
    """
    relative = _RELATIVE.match(text.strip())
    if relative:
        seconds = float(relative[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[relative[2]]
        return (time.time() if now is None else now) - seconds
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise InputError(f"{text!r} is neither an ISO 8601 time nor a duration like 30m, 12h or 7d") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp()


# --- what the traces hold -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One execution (or the refused proposal that ended the run), as the replay sees it."""

    tool: str
    fingerprint: str
    kind: str
    result: str
    """``ok``, ``unverified``, ``pending``, ``retryable``, ``cached``; ``refused`` for the last refused proposal."""
    after: int
    """The revision after it."""
    at: float
    operation_id: str | None = None
    effect: str = "none"


@dataclass(frozen=True)
class Case:
    """One finished task and how it counts."""

    task_id: str
    label: str
    steps: tuple[Step, ...]
    cursor_cycle: bool = False
    """The guard cut it on a pagination cycle: a rule without a threshold, which the trace cannot replay (it keeps
    no cursors or records), so every candidate cuts it there at the latest."""

    @property
    def executions(self) -> int:
        return sum(step.result != "refused" for step in self.steps)


def _steps(trace: Sequence[TraceEntry], final_revision: int) -> tuple[Step, ...]:
    """The executions of a trace, with the revision after each, and the refused proposal that ended it (if any)."""
    entries = [e for e in trace if e.kind == "tool" and e.fingerprint is not None and e.tool is not None]
    executed = [e for e in entries if e.result_class in _EXECUTED]
    polls = {e.fingerprint for e in executed if e.result_class == "pending"}
    steps = []
    for index, entry in enumerate(executed):
        after = executed[index + 1].revision if index + 1 < len(executed) else final_revision
        kind = "poll" if entry.fingerprint in polls else ("write" if entry.operation_id else "read")
        effect = entry.operation_state if kind == "write" and entry.operation_state else "none"
        after = max(after, entry.revision)
        steps.append(
            Step(
                entry.tool or "",
                entry.fingerprint or "",
                kind,
                entry.result_class,
                after,
                entry.at,
                entry.operation_id,
                effect,
            )
        )
    last = entries[-1] if entries else None
    if last is not None and last.result_class.startswith("refused:") and last.result_class[8:] in LOOP_REASONS:
        kind = "poll" if last.fingerprint in polls else ("write" if last.operation_id else "read")
        steps.append(Step(last.tool or "", last.fingerprint or "", kind, "refused", final_revision, last.at))
    return tuple(steps)


def _label(store: Store, task: TaskSnapshot, correct_only: bool) -> str | None:
    """An operator's latest label of ``task``, else what its outcome says (a loop rule's stop, an answer)."""
    labelled = store.transition_page(TransitionQuery(task_id=task.task_id, kind="label", limit=1))
    if labelled:
        return str(labelled[0].decisions.get("label", ""))
    outcome = task.outcome or {}
    reason = outcome.get("reason")
    if task.status == str(Status.STOPPED) and reason in {str(r) for r in LOOP_REASONS}:
        return "loop"
    if not correct_only and task.status in (str(Status.COMPLETED), str(Status.PARTIAL)):
        return "correct"
    return None


_PAGE = 200


def _ended(store: Store, family: str | None, since: float | None, until: float | None) -> Iterator[TaskSnapshot]:
    """The ended tasks of ``family`` updated within [since, until], a page at a time (never every row at once)."""
    after = None
    while True:
        query = TaskQuery(family=family, updated_after=since, updated_before=until, after=after, limit=_PAGE)
        page = store.task_page(query)
        yield from (task for task in page if task.status != "running")
        if len(page) < _PAGE:
            return
        after = (page[-1].created_at, page[-1].task_id)


def _cases(
    store: Store, *, family: str | None, since: float | None, until: float | None, correct_only: bool
) -> tuple[list[Case], int]:
    cases, skipped = [], 0
    for task in _ended(store, family, since, until):
        label = _label(store, task, correct_only)
        if label not in LABELS:
            skipped += 1
            continue
        cycled = (task.outcome or {}).get("reason") == str(Reason.CURSOR_CYCLE)
        cases.append(Case(task.task_id, label, _steps(store.trace(task.task_id), task.revision), cycled))
    return cases, skipped


# --- the replay ---------------------------------------------------------------------------------------------------


def replay(case: Case, policy: Policy) -> tuple[int, str] | None:
    """Where ``policy``'s loop rules would have cut the task: (executions that would have run, the rule), or None
    when they let every recorded step run."""
    clock = [0.0]
    guard = Guard(budget=_UNBOUNDED, store=MemoryStore(), task_id="replay", policy=policy, clock=lambda: clock[0])
    guard.shadow = False  # a replay enforces what it measures
    for index, step in enumerate(case.steps):
        clock[0] = step.at
        op = f"replay:{step.operation_id}" if step.kind == "write" else None
        # the trace keeps the task's revision: the replay's evidence reports it, so every call shares the task's key
        call = Call(step.tool, {"call": step.fingerprint}, step.kind, op, progress_key=TASK_KEY)  # type: ignore[arg-type]
        ticket = guard.authorize(call)
        if isinstance(ticket, Verdict):
            return (index, str(ticket.reason)) if ticket.reason in LOOP_REASONS else None
        if step.result == "refused":  # the recorded run ended here; what it would have returned is unknown
            return None
        result = {"status": "retryable" if step.result == "retryable" else "ok"}
        verdict = guard.settle(ticket, result, evidence=_evidence(step, ticket.revision, replayed=ticket.replay))
        if verdict is not None:
            return (index + 1, str(verdict.reason)) if verdict.reason in LOOP_REASONS else None
    return None


def _evidence(step: Step, revision: int, *, replayed: bool) -> Any:
    """The recorded result of ``step`` as evidence: unverified, or its revision after (a poll's pending, a write's
    effect)."""
    if step.result == "unverified":
        return UNVERIFIED
    effect = "committed" if replayed else step.effect
    return {"revision": max(step.after, revision), "done": False, "pending": step.result == "pending", "effect": effect}


def _score(cases: Sequence[Case], policy: Policy) -> dict[str, Any]:
    false_stops, cut, earlier, later = [], 0, 0, 0
    for case in cases:
        stop = replay(case, policy)
        if case.cursor_cycle and (stop is None or stop[0] > case.executions):
            stop = (case.executions, str(Reason.CURSOR_CYCLE))
        if case.label == "correct":
            if stop is not None:
                false_stops.append({"task_id": case.task_id, "after": stop[0], "rule": stop[1]})
        elif stop is None:
            later += 1
        else:
            cut += 1
            earlier += max(0, case.executions - stop[0])
    return {
        "false_stops": len(false_stops),
        "loops_cut": cut,
        "earlier": earlier,
        "later": later,
        "stopped": false_stops[:5],
    }


def _choose(current: Any, scored: list[dict[str, Any]], allowed: int) -> Any:
    """The value that cuts loops earliest within ``allowed`` false stops; the current one on a tie, or when none
    does better."""
    fit = [c for c in scored if c["false_stops"] <= allowed]
    if not fit:
        return current
    best = max(fit, key=lambda c: (c["loops_cut"], c["earlier"]))
    ties = [c["value"] for c in fit if (c["loops_cut"], c["earlier"]) == (best["loops_cut"], best["earlier"])]
    return current if current in ties else best["value"]


def _policy(base: Policy, rule: str, value: Any) -> Policy:
    if rule == "max_failures" and value:
        return dataclasses.replace(base, max_failures=value, failure_window=max(value, base.failure_window))
    return dataclasses.replace(base, **{rule: value})


def tune(
    store: Store,
    *,
    family: str | None = None,
    since: float | None = None,
    until: float | None = None,
    correct_only: bool = False,
    allowed_false_stops: int = 0,
) -> dict[str, Any]:
    """Replay the finished tasks in scope under each rule's candidates (see the module); JSON-ready. Without
    legitimate work in scope, every rule keeps its current value (nothing shows what a stricter one would stop)."""
    base = dataclasses.replace(Policy(), shadow=False)
    cases, skipped = _cases(store, family=family, since=since, until=until, correct_only=correct_only)
    rules: dict[str, Any] = {}
    chosen = base
    legitimate = any(c.label == "correct" for c in cases)
    for rule, values in CANDIDATES.items():
        current = getattr(base, rule)
        scored = [{"value": value, **_score(cases, _policy(base, rule, value))} for value in values]
        # without legitimate work in scope nothing shows what a stricter value would stop: keep the current one
        pick = _choose(current, scored, allowed_false_stops) if legitimate else current
        rules[rule] = {"current": current, "recommended": pick, "candidates": scored}
        chosen = _policy(chosen, rule, pick)
    loops = sum(c.label == "loop" for c in cases)
    return {
        "scope": {
            "family": family,
            "since": since,
            "until": until,
            "correct_only": correct_only,
            "tasks": len(cases),
            "correct": len(cases) - loops,
            "loops": loops,
            "left_out": skipped,
        },
        "rules": rules,
        "policy": policy_text(chosen),
        "totals": {**_score(cases, chosen), "current": _score(cases, base)},
    }


def policy_text(policy: Policy) -> str:
    """``Policy(...)`` with the tuned thresholds, as Python.

    >>> policy_text(Policy(max_stalled=4))[:42]
    'Policy(max_same_call=2, max_stalled=4, max'
    """
    names = ("max_same_call", "max_stalled", "max_cycle", "max_failures", "failure_window", "max_unverified")
    fields = [*names, "max_polls", "max_wait"]
    return "Policy(" + ", ".join(f"{name}={getattr(policy, name)!r}" for name in fields) + ")"


def render(report: dict[str, Any]) -> str:
    """The report as text for people: the scope, one table per rule, the recommended policy."""
    scope = report["scope"]
    lines = [
        f"{scope['tasks']} finished tasks replayed: {scope['correct']} legitimate, {scope['loops']} loops"
        f" ({scope['left_out']} left out: neither labelled nor ended by the model or a loop rule)"
    ]
    for rule, data in report["rules"].items():
        lines.append(f"\n{rule} (now {data['current']!r}, recommended {data['recommended']!r})")
        lines.append(
            f"  {'value':>8}  {'false stops':>11}  {'loops cut':>9}  {'executions earlier':>18}  {'not cut':>7}"
        )
        for c in data["candidates"]:
            mark = " <" if c["value"] == data["recommended"] else ""
            lines.append(
                f"  {c['value']!s:>8}  {c['false_stops']:>11}  {c['loops_cut']:>9}  {c['earlier']:>18}  "
                f"{c['later']:>7}{mark}"
            )
    totals = report["totals"]
    lines.append(
        f"\nrecommended: {report['policy']}\n  false stops {totals['false_stops']} (now "
        f"{totals['current']['false_stops']}), loops cut {totals['loops_cut']} (now {totals['current']['loops_cut']}), "
        f"{totals['earlier']} executions earlier (now {totals['current']['earlier']})"
    )
    return "\n".join(lines)
