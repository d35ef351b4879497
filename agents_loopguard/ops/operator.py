"""What an operator sees and does, as plain data: the views and actions behind ``loopguard`` and the HTTP API.

Every function takes a :class:`~agents_loopguard.store.base.Store` and returns JSON-ready data: numbers as numbers,
every timestamp as ISO 8601 UTC ending in ``Z`` (``None`` when the store holds none), stored JSON (arguments,
results, records) as objects, and text that may hold a credential redacted. Failures raise the families of
:mod:`~agents_loopguard.values.errors`: :class:`NotFoundError` for an unknown id, :class:`InputError` for a malformed
request, :class:`StateError` for a refusal by the state of a task, pause or operation. Nothing here prints, and
nothing imports a command-line or web framework.

Counters come as three parallel objects with the keys ``models``, ``tools`` and ``cost``: ``used``, ``limits`` and
``left`` (``cost`` is ``None`` without a cost budget).

>>> from agents_loopguard import Budget, Guard, MemoryStore
>>> store = MemoryStore()
>>> guard = Guard(budget=Budget(model_turns=3, tool_executions=2), store=store, task_id="t-1")
>>> guard.begin_turn()
>>> row, = task_rows(store)
>>> row["status"], row["used"], row["left"]
('running', {'models': 1, 'tools': 0, 'cost': 0.0}, {'models': 2, 'tools': 2, 'cost': None})
>>> stop_task(store, "t-1", reason="runaway", who="ana")["stop_mark"]
'runaway'
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..store.base import OperationState, Store, TaskSnapshot
from ..values.budget import Budget
from ..values.canonical import redact
from ..values.errors import InputError, NotFoundError, StateError
from ..values.outcome import Usage
from . import pages
from .approvals import decide
from .pages import TASK_STATUSES
from .recovery import reconcile, recover
from .rows import (
    iso_time,
    now,
    operation_row,
    pause_row,
    record_of,
    redacted_text,
    task_of,
    task_row,
    transition_row,
)
from .stops import request_stop

__all__ = [
    "TASK_STATUSES",
    "decide_pause",
    "iso_time",
    "operation_view",
    "pause_notice",
    "pause_view",
    "pending_pauses",
    "reconcile_operation",
    "recover_task",
    "stop_task",
    "task_record",
    "task_rows",
    "task_view",
]

TIMELINE = 50
"""Steps of the timeline a task's view shows unless asked for another number."""
PER_TASK = 200
"""The most operations, pauses and transitions a task's view shows (the pages list them all)."""

_PAST = {"approve": "approved", "reject": "rejected"}
_log = logging.getLogger("agents_loopguard.ops.operator")


def _plural(count: float, word: str) -> str:
    return f"{count:g} {word}" + ("" if count == 1 else "s")


def _window(limit: int | None) -> None:
    for name, value in (("limit", limit),):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InputError(f"{name} must be a whole number >= 0, got {value!r}")


# --- views --------------------------------------------------------------------------------------------------------


def task_rows(store: Store, *, status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The newest tasks (at most ``limit``), or those with ``status``, as rows: counters used, limits and left,
    revision, stop mark, times (the first page of :func:`agents_loopguard.ops.pages.task_page`, which pages on).

    >>> from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(2, 2), store=store, task_id="a").finish(Status.STOPPED, Reason.MODEL_BUDGET)
    >>> _ = Guard(budget=Budget(2, 2), store=store, task_id="b")
    >>> [(r["task_id"], r["status"], r["reason"]) for r in task_rows(store)]
    [('b', 'running', None), ('a', 'stopped', 'model_budget')]
    >>> [r["task_id"] for r in task_rows(store, status="stopped")]
    ['a']
    """
    rows: list[dict[str, Any]] = pages.task_page(store, status=status, limit=limit)["tasks"]
    return rows


def task_view(store: Store, task_id: str, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
    """One task: its row with the stored outcome, the timeline (the last ``limit`` steps, 50 by default, or those
    before ``cursor``; ``timeline_total`` counts them all, ``timeline_next`` is the cursor of the earlier steps),
    its last :data:`PER_TASK` operations, pauses and transitions, and the allowed next actions. A stored outcome that
    is not a valid recovery record is shown as stored, with ``record_error`` saying why no next action is offered.

    >>> from agents_loopguard import Budget, MemoryStore, create_runner
    >>> store = MemoryStore()
    >>> run = create_runner(budget=Budget(4, 4), store=store, task_id="t-1", execute=lambda c: {"status": "ok"},
    ...                     verify=lambda c, r: {"revision": 1, "done": True, "effect": "none"})
    >>> _ = run([{"tool": "search", "kind": "read", "args": {"q": "refund"}}])
    >>> view = task_view(store, "t-1")
    >>> view["task"]["status"], [(s["kind"], s["arguments"]) for s in view["timeline"]]
    ('completed', [('model', None), ('tool', {'q': 'refund'})])
    >>> view["allowed_next_actions"]
    ['return_result']
    """
    _window(limit)
    task = task_of(store, task_id)
    timeline = pages.timeline_page(store, task_id, cursor=cursor, limit=max(1, TIMELINE if limit is None else limit))
    shown = timeline["timeline"] if limit != 0 else []
    record_error, steps = None, list[str]()
    if task.outcome is None:
        actions, steps = _running_actions(task, _unknown_writes(store, task_id))
    else:
        try:
            actions = [str(a) for a in record_of(task).allowed_next_actions]
        except StateError as exc:
            actions, record_error = [], str(exc)
    return {
        "task": {**task_row(task), "outcome": redact(task.outcome)},
        "record_error": record_error,
        "timeline": shown,
        "timeline_total": timeline["total"],
        "timeline_next": timeline["next"],
        "operations": _oldest_first(pages.operation_page(store, task_id=task_id, limit=PER_TASK)["operations"]),
        "pauses": pages.pause_page(store, status=None, task_id=task_id, limit=PER_TASK)["pauses"],
        "transitions": _oldest_first(pages.transition_page(store, task_id=task_id, limit=PER_TASK)["transitions"]),
        "allowed_next_actions": actions,
        "next_steps": steps,
    }


def _oldest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return rows[::-1]


def _running_actions(task: TaskSnapshot, unknown: list[str]) -> tuple[list[str], list[str]]:
    """What an operator can do with a task that has no outcome (running, or its worker died without one), and
    the commands of that path: a write whose effect is unknown is reconciled first, then the task is recovered."""
    reopen = f"reopen the task by a recorded decision: loopguard recover {task.task_id} --who W --why ..."
    if not unknown:  # marked: a live worker stops at its next dispatch; a dead one never will
        if task.stop_reason:
            return ["recover"], [f"once no worker runs it, {reopen}"]
        if task.reopened:  # by a recorded transition; no worker has taken it up yet
            return ["stop"], [
                f"reopened and not running: nothing runs it until the application runs task {task.task_id} again "
                "(the same task id: its counters go on)"
            ]
        return ["stop"], []
    ops = ", ".join(unknown)
    steps = [
        f"ask the receiver about {ops}, then record its answer: loopguard reconcile {unknown[0]} "
        "committed|not_committed --who W",
        f"then {reopen}",
    ]
    if task.stop_reason:
        return ["query_operation_status"], steps
    first = (
        f"no outcome is stored and {ops} has an unknown effect: if its worker died (a kill during the run or an "
        f"approved resume), set the stop mark so that no worker continues it: loopguard stop {task.task_id}"
    )
    return ["stop", "query_operation_status"], [first, *steps]


def pause_view(store: Store, pause_id: str) -> dict[str, Any]:
    """A pause: its pending calls (arguments as objects, each with its decision), the counters stored with it, its
    status, who decided or resumed it, and whether its digest still matches (``digest_ok``).

    >>> from agents_loopguard import Budget, Guard, MemoryStore
    >>> from agents_loopguard.ops.approvals import pause_digest
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(5, 5), store=store, task_id="t1")
    >>> calls = [{"call_id": "c1", "tool": "pay", "arguments": '{"amount":5}', "operation_id": "inv-1"}]
    >>> _ = store.save_pause("t1", "p1", "{}", calls, digest=pause_digest("t1", "{}", calls),
    ...                      outcome={"status": "needs_human"})
    >>> view = pause_view(store, "p1")
    >>> view["status"], view["digest_ok"], view["pending_calls"][0]["arguments"]
    ('pending', True, {'amount': 5})
    """
    record = store.pause(pause_id)
    if record is None:
        raise NotFoundError(f"no pause {pause_id!r} in this store")
    return pause_row(record, store)


def pause_notice(store: Store, pause_id: str) -> dict[str, Any]:
    """What a notice of a new pause says: its id, its task, and each pending call's tool, operation id and
    arguments (redacted, decoded from the stored canonical JSON); ``LookupError`` for an unknown pause."""
    record = store.pause(pause_id)
    if record is None:
        raise LookupError(f"pause {pause_id!r} is not in the store")
    calls = []
    for call in record.pending_calls:
        arguments: Any = call.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        calls.append(
            {
                "call_id": call.get("call_id"),
                "tool": call.get("tool"),
                "operation_id": call.get("operation_id"),
                "arguments": redact(arguments),
            }
        )
    return {"pause_id": record.pause_id, "task_id": record.task_id, "calls": calls}


def pending_pauses(store: Store, *, limit: int = 100) -> list[dict[str, Any]]:
    """The pauses waiting for a decision (the oldest ``limit``), each with its task's current counters under
    ``task`` (the first page of :func:`agents_loopguard.ops.pages.pause_page`, which pages on).

    >>> from agents_loopguard import MemoryStore
    >>> pending_pauses(MemoryStore())
    []
    """
    rows: list[dict[str, Any]] = pages.pause_page(store, status="pending", limit=limit)["pauses"]
    return rows


def operation_view(store: Store, operation_id: str) -> dict[str, Any]:
    """One operation of the ledger: its task, tool, state, stored result (redacted), attempts and times.

    >>> from agents_loopguard import MemoryStore
    >>> operation_view(MemoryStore(), "inv-1")
    Traceback (most recent call last):
    ...
    agents_loopguard.values.errors.NotFoundError: no operation 'inv-1' in this store
    """
    record = store.lookup_operation(operation_id)
    if record is None:
        raise NotFoundError(f"no operation {operation_id!r} in this store")
    return operation_row(record)


def task_record(store: Store, task_id: str) -> dict[str, Any]:
    """The task's stored recovery record, validated; StateError while it has no terminal outcome.

    >>> from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(2, 2), store=store, task_id="t1").finish(Status.STOPPED, Reason.SAME_CALL)
    >>> task_record(store, "t1")["allowed_next_actions"]
    ['deliver_verified', 'human_review', 'close']
    """
    return record_of(task_of(store, task_id)).to_dict()


# --- actions ------------------------------------------------------------------------------------------------------


def _unknown_writes(store: Store, task_id: str) -> list[str]:
    found = pages.operation_page(store, state=str(OperationState.UNKNOWN), task_id=task_id, limit=PER_TASK)
    return [o["operation_id"] for o in reversed(found["operations"])]


def _stop_message(before: TaskSnapshot, after: TaskSnapshot, unknown: list[str]) -> str:
    mark = redacted_text(after.stop_reason)
    if before.status != "running":
        reason = (before.outcome or {}).get("reason")
        text = (
            f"task {before.task_id} has already ended ({before.status}/{reason}): nothing is running; the stop mark "
            f"({mark}) refuses every later model call and tool execution until a recorded recovery clears it"
        )
    elif before.stop_reason is not None:
        text = (
            f"task {before.task_id} already had a stop mark ({mark}), which is kept; a running worker stops at its "
            "next dispatch (model call, tool execution or handoff)"
        )
    else:
        text = (
            f"task {before.task_id}: stop mark set ({mark}); a running worker stops at its next dispatch "
            "(model call, tool execution or handoff)"
        )
    if unknown:
        text += f"; writes with an unknown result (reconcile them before resuming): {', '.join(unknown)}"
    return text


def stop_task(store: Store, task_id: str, *, reason: str, who: str) -> dict[str, Any]:
    """Set the task's stop mark: every later model call and tool execution, by any worker, is refused.

    The first mark wins (a later stop keeps it). The store records who set it (a ``stop`` transition), and the
    stop hooks run once, in this process, when this call set the mark (:func:`agents_loopguard.ops.stops.request_stop`;
    ``hooks`` lists each with its error, if any). Returns the task's status, the mark, whether it was set
    by this call, the writes whose result is unknown, and a ``message`` that fits the task's state.

    >>> from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(2, 2), store=store, task_id="t1").finish(Status.COMPLETED, Reason.VALIDATED_DONE)
    >>> stopped = stop_task(store, "t1", reason="audit", who="ana")
    >>> stopped["set_now"], "nothing is running" in stopped["message"]
    (True, True)
    """
    if not who:
        raise InputError("a stop is recorded with who asked for it")
    before = task_of(store, task_id)
    stored_reason = str(redact(reason)) if reason else "stop_requested"
    stopped = request_stop(store, task_id, reason=stored_reason, who=str(redact(who)), now=now())
    after = stopped.task
    unknown = _unknown_writes(store, task_id)
    _log.info("stop mark on task %s by %s: %s", task_id, redacted_text(who), stored_reason, extra={"task_id": task_id})
    return {
        "task_id": task_id,
        "status": after.status,
        "reason": (after.outcome or {}).get("reason"),
        "stop_mark": redacted_text(after.stop_reason),
        "set_now": stopped.newly_set,
        "who": redacted_text(who),
        "unknown_writes": unknown,
        "message": _stop_message(before, after, unknown),
        "hooks": [{"hook": run.hook, "ok": run.ok, "error": run.error} for run in stopped.hooks],
    }


def decide_pause(
    store: Store,
    pause_id: str,
    *,
    who: str,
    approve: Iterable[str] = (),
    reject: Iterable[str] = (),
    approve_all: bool = False,
    reject_all: bool = False,
    why: str = "",
) -> dict[str, Any]:
    """Record an operator's decisions on a pending pause (see :func:`agents_loopguard.ops.approvals.decide`); returns
    the pause as :func:`pause_view` shows it, with a ``message``.

    >>> from agents_loopguard import Budget, Guard, MemoryStore
    >>> from agents_loopguard.ops.approvals import pause_digest
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(5, 5), store=store, task_id="t1")
    >>> calls = [{"call_id": "c1", "tool": "pay", "arguments": "{}", "operation_id": "inv-1"}]
    >>> _ = store.save_pause("t1", "p1", "{}", calls, digest=pause_digest("t1", "{}", calls),
    ...                      outcome={"status": "needs_human"})
    >>> decide_pause(store, "p1", who="ana", reject_all=True)["message"]
    "pause p1 of task t1: c1 rejected; the application's resume applies these decisions"
    """
    record = decide(
        store,
        pause_id,
        who=who,
        approve=list(approve),
        reject=list(reject),
        approve_all=approve_all,
        reject_all=reject_all,
        why=why,
    )
    decided = ", ".join(f"{call} {_PAST.get(verb, verb)}" for call, verb in record.decisions.items())
    view = pause_row(record, store)
    view["message"] = (
        f"pause {record.pause_id} of task {record.task_id}: {decided}; the application's resume applies these decisions"
    )
    for call in view["pending_calls"]:  # an approved write the ledger already holds as unknown will not be sent
        if call["decision"] == "approve" and call["already_unknown"]:
            view["message"] += f"; note: call {call['call_id']}: {call['already_unknown']}"
    return view


def _answer(answer: OperationState | str) -> OperationState:
    try:
        return OperationState(answer)
    except ValueError:
        choices = ", ".join(s.value for s in OperationState)
        raise InputError(f"the receiver's answer {answer!r} is none of {choices}") from None


def _reconcile_message(operation_id: str, state: OperationState, task: TaskSnapshot | None, reopened: list[str]) -> str:
    """What a reconciliation did, in one line: the answer, and every task it reopened (by count and by id)."""
    if state is OperationState.UNKNOWN:
        return (
            f"operation {operation_id} stays unknown; nothing was recorded: query the receiver again with the "
            "operation id, or ask a human"
        )
    text = f"operation {operation_id}: {state}"
    if reopened:
        ids = ", ".join(reopened)
        text += (
            f"; {_plural(len(reopened), 'task')} reopened ({ids}), counters kept: "
            f"{'it waits' if len(reopened) == 1 else 'they wait'} for a run of the same task id (status reopened)"
        )
    if task is not None and task.task_id not in reopened:
        text += f"; task {task.task_id} stays {task_row(task)['status']}"
    return text


def reconcile_operation(
    store: Store,
    operation_id: str,
    answer: OperationState | str,
    *,
    who: str,
    why: str = "",
    result: Any = None,
    correct: bool = False,
) -> dict[str, Any]:
    """Record what the receiving system says about a write whose result is unknown (see
    :func:`agents_loopguard.ops.recovery.reconcile`): the operation after it, whether the task was reopened, the
    writes of the task still unknown, the allowed next actions and a ``message``. The same answer about a known
    operation confirms it; another answer is refused unless ``correct`` (the ledger disagreed with the receiver).

    >>> from agents_loopguard import Budget, MemoryStore, create_runner
    >>> store = MemoryStore()
    >>> def lost(call): raise TimeoutError("no response")
    >>> pay = {"tool": "pay", "kind": "write", "operation_id": "inv-7", "args": {"amount": 5}}
    >>> run = create_runner(budget=Budget(3, 3), store=store, task_id="t-7", execute=lost, verify=lambda c, r: None)
    >>> _ = run([pay])
    >>> done = reconcile_operation(store, "inv-7", "committed", who="ops", result={"receipt": "r-9"})
    >>> done["state"], done["task_reopened"], done["operation"]["result"]
    ('committed', True, {'receipt': 'r-9'})
    """
    if not who:
        raise InputError("a reconciliation is recorded with who queried the receiver")
    state = _answer(answer)
    done = reconcile(store, operation_id, state, who=who, why=why, result=result, correct=correct, now=now())
    task_id = done.operation.task_id
    task = store.task(task_id)
    reopened = done.transition is not None
    every = [task_id] * reopened + list(done.reopened_elsewhere)
    return {
        "operation_id": operation_id,
        "state": str(done.operation.state),
        "operation": operation_row(done.operation),
        "task_id": task_id,
        "task_status": task_row(task)["status"] if task else None,
        "task_reopened": reopened,
        "reopened_tasks": every,
        "still_unknown": _unknown_writes(store, task_id),
        "transition": transition_row(done.transition) if done.transition else None,
        "allowed_next_actions": [str(a) for a in done.allowed_next_actions],
        "message": _reconcile_message(operation_id, state, task, every),
    }


def recover_task(
    store: Store, task_id: str, *, who: str, why: str, extend: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Reopen a stopped or partial task by a recorded decision (see :func:`agents_loopguard.ops.recovery.recover`),
    its limits grown by ``extend`` (``{"model_turns": 2}``); returns the task's row after it, the transition and a
    ``message``.

    >>> from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(1, 1), store=store, task_id="t1").finish(Status.STOPPED, Reason.MODEL_BUDGET)
    >>> recover_task(store, "t1", who="lead", why="one more turn", extend={"model_turns": 1})["message"]
    'task t1 reopened by lead: limits now 2 turns and 1 tool execution; used so far 0 turns and 0 tool executions'
    """
    transition = recover(store, task_id, who=who, why=why, extend=extend, now=now())
    after = task_of(store, task_id)
    b, u = after.budget, after.used
    message = (
        f"task {task_id} reopened by {redacted_text(who)}: limits now {_plural(b.model_turns, 'turn')} and "
        f"{_plural(b.tool_executions, 'tool execution')}; used so far {_plural(u.models, 'turn')} and "
        f"{_plural(u.tools, 'tool execution')}"
    )
    return {"task": task_row(after), "transition": transition_row(transition), "message": message + _other_limits(b, u)}


def _other_limits(budget: Budget, used: Usage) -> str:
    """The cost, token and deadline limits a task has, with what is used of them (empty when it has none)."""
    spent = {
        "cost": used.cost,
        "input_tokens": used.input_tokens,
        "output_tokens": used.output_tokens,
        "total_tokens": used.input_tokens + used.output_tokens,
    }
    parts = [
        f"{name.replace('_', ' ')} {limit:g} (used {spent[name]:g})"
        for name in spent
        if (limit := getattr(budget, name)) is not None
    ]
    if budget.deadline is not None:
        parts.append(f"deadline {iso_time(budget.deadline)}")
    return "; " + ", ".join(parts) if parts else ""
