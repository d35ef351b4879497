"""The operators' lists, one page at a time (R22): tasks, pauses, operations, transitions and a task's timeline.

Each function reads one page from the store (:mod:`agents_loopguard.store.queries`: a keyset page on an index) and
answers ``{"<rows>": [...], "next": cursor, "limit": n}``: pass ``cursor=next`` for the page after; ``next`` is
``None`` on the last page. A cursor is an opaque text (the sort key of the last row shown), so a page costs the same
on a store of a thousand tasks or of millions, and a task that runs while you page never moves between pages.

Times (``updated_after``, ``updated_before``) are seconds since the epoch, ISO 8601 text (``2025-05-01``,
``2025-05-01T10:00:00Z``) or an age (``30m``, ``12h``, ``7d``: that long before now).

>>> from agents_loopguard import Budget, Guard, MemoryStore
>>> store = MemoryStore()
>>> for n in range(3):
...     _ = Guard(budget=Budget(2, 2), store=store, task_id=f"ticket-{n}", clock=lambda n=n: 100.0 + n)
>>> first = task_page(store, limit=2)
>>> [r["task_id"] for r in first["tasks"]], first["next"] is not None
(['ticket-2', 'ticket-1'], True)
>>> [r["task_id"] for r in task_page(store, limit=2, cursor=first["next"])["tasks"]]
['ticket-0']
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..store.base import OperationState, Store
from ..store.queries import Key, OperationQuery, PauseQuery, TaskQuery, TransitionQuery
from ..store.records import REOPENED
from ..values.errors import InputError
from ..values.outcome import Reason, Status
from .rows import counters, now, operation_row, pause_row, step_row, task_row, transition_row

__all__ = [
    "MAX_PAGE",
    "PAUSE_STATUSES",
    "TASK_STATUSES",
    "operation_page",
    "parse_time",
    "pause_page",
    "task_page",
    "timeline_page",
    "transition_page",
]

MAX_PAGE = 1000
"""The most rows one page may hold."""
TASK_STATUSES: tuple[str, ...] = ("running", REOPENED, *(str(s) for s in Status))
"""The statuses a task can have: ``running``; ``reopened`` (by a recorded transition, until a run picks it up);
or the terminal status of its outcome. A ``running`` filter lists the reopened tasks too (neither has an outcome)."""
PAUSE_STATUSES = ("pending", "decided", "resumed")
TRANSITION_KINDS = ("resume", "recover", "reconcile", "confirm", "correct", "stop")
T = TypeVar("T")
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


# --- input ----------------------------------------------------------------------------------------------------------


def parse_time(value: float | str | None, *, name: str = "time", clock: Callable[[], float] = now) -> float | None:
    """A moment given as seconds since the epoch, ISO 8601 text (UTC unless it says otherwise) or an age before now.

    >>> parse_time("1970-01-02"), parse_time("2h", clock=lambda: 10_000.0), parse_time(None)
    (86400.0, 2800.0, None)
    >>> parse_time("yesterday")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agents_loopguard.values.errors.InputError: time 'yesterday' is neither a time (2025-05-01, ...
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InputError(f"{name} must be a finite number of seconds, got {value!r}")
        return float(value)
    text = str(value).strip()
    age = _AGE.fullmatch(text)
    if age is not None:
        return clock() - float(age.group(1)) * _SECONDS[age.group(2)]
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            f"{name} {text!r} is neither a time (2025-05-01, 2025-05-01T10:00:00Z) nor an age (30m, 12h, 7d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
    return limit


def _choice(name: str, value: str | None, choices: Sequence[str]) -> str | None:
    if value is not None and value not in choices:
        raise InputError(f"unknown {name} {value!r}: choose one of {', '.join(choices)}")
    return value


def _cursor(key: Key) -> str:
    raw = json.dumps([key[0], key[1]], separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _after(cursor: str | None) -> Key | None:
    """The keyset a cursor names; a cursor that is not one of ours is bad input."""
    if cursor is None or cursor == "":
        return None
    try:
        at, key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not isinstance(key, str):
            raise ValueError(cursor)
        return float(at), key
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InputError(f"cursor {cursor[:80]!r} is not a page cursor: pass the `next` of a page") from None


def _paged(rows: list[T], limit: int, key: Callable[[T], Key]) -> tuple[list[T], str | None]:
    """The page (the store was asked for one row more than ``limit``) and the cursor of the page after it."""
    if len(rows) <= limit:
        return rows, None
    shown = rows[:limit]
    return shown, _cursor(key(shown[-1]))


# --- pages ----------------------------------------------------------------------------------------------------------


def task_page(
    store: Store,
    *,
    status: str | None = None,
    reason: str | None = None,
    family: str | None = None,
    prefix: str | None = None,
    updated_after: float | str | None = None,
    updated_before: float | str | None = None,
    cursor: str | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """A page of tasks, newest first, as rows (counters used, limits and left, revision, stop mark, family, times);
    filter by status, outcome reason, family, task id prefix, last update. See the module for ``cursor``."""
    limit = _limit(limit)
    status = _choice("status", status, TASK_STATUSES)
    reason = _choice("reason", reason, [str(r) for r in Reason])
    if status == REOPENED:  # stored as a running task whose reason says it waits for a run
        if reason is not None:
            raise InputError("a reopened task has no outcome, so no reason: filter by status or by reason")
        status, reason = "running", REOPENED
    query = TaskQuery(
        status=status,
        reason=reason,
        family=family or None,
        prefix=prefix or None,
        updated_after=parse_time(updated_after, name="updated_after"),
        updated_before=parse_time(updated_before, name="updated_before"),
        after=_after(cursor),
        limit=limit + 1,
    )
    found, following = _paged(store.task_page(query), limit, lambda t: (t.created_at, t.task_id))
    return {"tasks": [task_row(t) for t in found], "next": following, "limit": limit}


def pause_page(
    store: Store,
    *,
    status: str | None = "pending",
    task_id: str | None = None,
    cursor: str | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """A page of pauses, oldest first (by default those waiting for a decision), each with its task's current
    counters under ``task``."""
    limit = _limit(limit)
    query = PauseQuery(_choice("pause status", status, PAUSE_STATUSES), task_id or None, _after(cursor), limit + 1)
    found, following = _paged(store.pause_page(query), limit, lambda p: (p.created_at, p.pause_id))
    rows = []
    for record in found:
        view = pause_row(record, store)
        task = store.task(record.task_id)
        view["task"] = {"status": task.status, **counters(task.budget, task.used)} if task is not None else None
        rows.append(view)
    return {"pauses": rows, "next": following, "limit": limit}


def operation_page(
    store: Store,
    *,
    state: str | None = None,
    task_id: str | None = None,
    prefix: str | None = None,
    updated_after: float | str | None = None,
    updated_before: float | str | None = None,
    cursor: str | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """A page of the ledger, newest first: filter by state (``unknown`` lists the writes to reconcile), task,
    operation id prefix, last update."""
    limit = _limit(limit)
    query = OperationQuery(
        state=_choice("state", state, [s.value for s in OperationState]),
        task_id=task_id or None,
        prefix=prefix or None,
        updated_after=parse_time(updated_after, name="updated_after"),
        updated_before=parse_time(updated_before, name="updated_before"),
        after=_after(cursor),
        limit=limit + 1,
    )
    found, following = _paged(store.operation_page(query), limit, lambda o: (o.created_at, o.operation_id))
    return {"operations": [operation_row(o) for o in found], "next": following, "limit": limit}


def transition_page(
    store: Store, *, task_id: str | None = None, kind: str | None = None, cursor: str | None = None, limit: int = 20
) -> dict[str, Any]:
    """A page of the operators' recorded transitions (who, why, when), newest first."""
    limit = _limit(limit)
    query = TransitionQuery(task_id or None, _choice("kind", kind, TRANSITION_KINDS), _after(cursor), limit + 1)
    found, following = _paged(store.transition_page(query), limit, lambda t: (t.at, t.transition_id))
    return {"transitions": [transition_row(t) for t in found], "next": following, "limit": limit}


def timeline_page(store: Store, task_id: str, *, cursor: str | None = None, limit: int = 50) -> dict[str, Any]:
    """A page of a task's timeline: its last ``limit`` steps (or those before ``cursor``), in order, with
    ``total`` the number of steps the task has recorded and ``next`` the cursor of the earlier steps."""
    limit = _limit(limit)
    after = _after(cursor)
    before = int(after[0]) if after is not None else None
    entries = store.trace_page(task_id, before=before, limit=limit + 1)
    shown = entries[:limit]
    following = _cursor((float(shown[-1].seq), "")) if len(entries) > limit else None
    total = entries[0].seq if entries and before is None else None
    return {"timeline": [step_row(e) for e in reversed(shown)], "total": total, "next": following, "limit": limit}
