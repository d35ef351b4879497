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
import datetime as dt
import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..store.base import (
    OperationRecord,
    OperationState,
    PauseRecord,
    Store,
    TaskSnapshot,
    TraceEntry,
    TransitionRecord,
)
from ..values.budget import Budget
from ..values.canonical import redact
from ..values.errors import InputError, NotFoundError, StateError
from ..values.outcome import RecordError, RecoveryRecord, Status, Usage
from .approvals import check_pause, decide
from .recovery import reconcile, recover
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

TASK_STATUSES: tuple[str, ...] = ("running", *(str(s) for s in Status))
"""The statuses a task can have: ``running``, or the terminal status of its outcome."""

_PAST = {"approve": "approved", "reject": "rejected"}
_log = logging.getLogger("agents_loopguard.ops.operator")


# --- plain data ---------------------------------------------------------------------------------------------------


def iso_time(ts: float | None) -> str | None:
    """A store timestamp (seconds since the epoch) as ISO 8601 UTC with ``Z``; ``None`` for none recorded (0 too).

    >>> iso_time(1700000000.25)
    '2023-11-14T22:13:20.250Z'
    >>> iso_time(None), iso_time(0.0)
    (None, None)
    """
    if not ts or not math.isfinite(ts):
        return None
    try:
        moment = dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)
    except (OverflowError, OSError, ValueError):  # a damaged row: say so, and show the rest
        return f"{ts!r} (not a time)"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now() -> float:
    return time.time()


def _counters(budget: Budget, used: Usage) -> dict[str, Any]:
    """``used``, ``limits``, ``left`` (keys models/tools/cost) and the ``deadline``."""
    cost_left = None if budget.cost is None else round(max(0.0, budget.cost - used.cost), 12)
    return {
        "used": {"models": used.models, "tools": used.tools, "cost": used.cost},
        "limits": {"models": budget.model_turns, "tools": budget.tool_executions, "cost": budget.cost},
        "left": {
            "models": max(0, budget.model_turns - used.models),
            "tools": max(0, budget.tool_executions - used.tools),
            "cost": cost_left,
        },
        "deadline": iso_time(budget.deadline),
    }


def _text(value: str | None) -> str | None:
    """Operator text (who, why, a stop reason) as shown: credentials redacted."""
    return None if value is None else str(redact(value))


def _json_object(value: Any) -> Any:
    """A value stored as JSON text (a pending call's arguments) as the object it encodes; other text stays text."""
    if isinstance(value, (str, bytes)):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    return redact(value)


def _row(task: TaskSnapshot) -> dict[str, Any]:
    outcome = task.outcome or {}
    return {
        "task_id": task.task_id,
        "status": task.status,
        "reason": outcome.get("reason"),
        **_counters(task.budget, task.used),
        "revision": task.revision,
        "stalled": task.stalled,
        "stop_mark": _text(task.stop_reason),
        "created_at": iso_time(task.created_at),
        "updated_at": iso_time(task.updated_at),
    }


def _step(entry: TraceEntry) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "at": iso_time(entry.at),
        "kind": entry.kind,
        "tool": entry.tool,
        "arguments": redact(entry.args),
        "result_class": entry.result_class,
        "revision": entry.revision,
        "models": entry.models,
        "tools": entry.tools,
        "fingerprint": entry.fingerprint,
        "operation_id": entry.operation_id,
        "operation_state": entry.operation_state,
    }


def _operation(op: OperationRecord) -> dict[str, Any]:
    return {
        "operation_id": op.operation_id,
        "task_id": op.task_id,
        "tool": op.tool,
        "state": str(op.state),
        "result": redact(op.result),
        "attempts": op.attempts,
        "payload": op.payload,
        "created_at": iso_time(op.created_at),
        "updated_at": iso_time(op.updated_at),
    }


def _delta(delta: Mapping[str, Any]) -> dict[str, Any]:
    shown = dict(redact(dict(delta)))
    if isinstance(delta.get("deadline"), (int, float)):
        shown["deadline"] = iso_time(float(delta["deadline"]))
    return shown


def _transition(t: TransitionRecord) -> dict[str, Any]:
    return {
        "transition_id": t.transition_id,
        "task_id": t.task_id,
        "kind": t.kind,
        "who": _text(t.who),
        "why": _text(t.why),
        "at": iso_time(t.at),
        "pause_id": t.pause_id,
        "from_outcome": redact(t.from_outcome),
        "decisions": dict(t.decisions),
        "budget_delta": _delta(t.budget_delta),
    }


def _digest_ok(record: PauseRecord) -> bool:
    try:
        check_pause(record)
    except StateError:
        return False
    return True


def _committed(store: Store, operation_id: Any) -> str | None:
    """What to tell the approver when the call's operation is already committed (nothing would run again)."""
    op = store.lookup_operation(operation_id) if isinstance(operation_id, str) and operation_id else None
    if op is None or op.state is not OperationState.COMMITTED:
        return None
    return (
        f"operation {operation_id!r} is already committed (by task {op.task_id!r}): approving runs nothing, "
        "the stored result is returned; rejecting does not undo it"
    )


def _pause(record: PauseRecord, store: Store) -> dict[str, Any]:
    calls = [
        {
            "call_id": call.get("call_id"),
            "tool": call.get("tool"),
            "operation_id": call.get("operation_id"),
            "arguments": _json_object(call.get("arguments")),
            "decision": record.decisions.get(str(call.get("call_id"))),
            "already_committed": _committed(store, call.get("operation_id")),
        }
        for call in record.pending_calls
    ]
    return {
        "pause_id": record.pause_id,
        "task_id": record.task_id,
        "status": record.status,
        "digest_ok": _digest_ok(record),
        "pending_calls": calls,
        **_counters(record.budget, record.used),
        "decisions": dict(record.decisions),
        "decided_by": _text(record.decided_by),
        "decided_why": _text(record.decided_why),
        "decided_at": iso_time(record.decided_at),
        "resumed_by": _text(record.resumed_by),
        "created_at": iso_time(record.created_at),
        "resumed_at": iso_time(record.resumed_at),
    }


def _task(store: Store, task_id: str) -> TaskSnapshot:
    task = store.task(task_id)
    if task is None:
        raise NotFoundError(f"no task {task_id!r} in this store")
    return task


def _record(task: TaskSnapshot) -> RecoveryRecord:
    """The task's stored recovery record; StateError when it has none yet or it is malformed."""
    if task.outcome is None:
        raise StateError(f"task {task.task_id!r} has no terminal outcome yet (status {task.status})")
    try:
        return RecoveryRecord.from_json(task.outcome)
    except RecordError as exc:
        raise StateError(f"task {task.task_id!r}: {exc}") from None


def _plural(count: float, word: str) -> str:
    return f"{count:g} {word}" + ("" if count == 1 else "s")


def _window(limit: int | None, offset: int = 0) -> None:
    for name, value in (("limit", limit), ("offset", offset)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InputError(f"{name} must be a whole number >= 0, got {value!r}")


# --- views --------------------------------------------------------------------------------------------------------


def task_rows(
    store: Store, *, status: str | None = None, limit: int | None = None, offset: int = 0
) -> list[dict[str, Any]]:
    """Every task (newest first), or those with ``status``, as rows: counters used, limits and left, revision, stop
    mark, times. ``limit``/``offset`` page through them.

    >>> from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(2, 2), store=store, task_id="a").finish(Status.STOPPED, Reason.MODEL_BUDGET)
    >>> _ = Guard(budget=Budget(2, 2), store=store, task_id="b")
    >>> [(r["task_id"], r["status"], r["reason"]) for r in task_rows(store)]
    [('b', 'running', None), ('a', 'stopped', 'model_budget')]
    >>> [r["task_id"] for r in task_rows(store, status="stopped")]
    ['a']
    """
    if status is not None and status not in TASK_STATUSES:
        raise InputError(f"unknown status {status!r}: choose one of {', '.join(TASK_STATUSES)}")
    _window(limit, offset)
    tasks = [t for t in reversed(store.tasks()) if status is None or t.status == status]
    end = None if limit is None else offset + limit
    return [_row(t) for t in tasks[offset:end]]


def task_view(store: Store, task_id: str, *, limit: int | None = None) -> dict[str, Any]:
    """One task: its row with the stored outcome, the timeline (the last ``limit`` steps; ``timeline_total`` counts
    them all), operations, pauses, transitions and the allowed next actions. A stored outcome that is not a valid
    recovery record is shown as stored, with ``record_error`` saying why no next action is offered.

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
    task = _task(store, task_id)
    trace = store.trace(task_id)
    shown = trace if limit is None else trace[len(trace) - min(limit, len(trace)) :]
    record_error, steps = None, list[str]()
    if task.outcome is None:
        actions, steps = _running_actions(task, _unknown_writes(store, task_id))
    else:
        try:
            actions = [str(a) for a in _record(task).allowed_next_actions]
        except StateError as exc:
            actions, record_error = [], str(exc)
    return {
        "task": {**_row(task), "outcome": redact(task.outcome)},
        "record_error": record_error,
        "timeline": [_step(e) for e in shown],
        "timeline_total": len(trace),
        "operations": [_operation(o) for o in store.operations(task_id)],
        "pauses": [_pause(p, store) for p in store.pauses(task_id)],
        "transitions": [_transition(t) for t in store.transitions(task_id)],
        "allowed_next_actions": actions,
        "next_steps": steps,
    }


def _running_actions(task: TaskSnapshot, unknown: list[str]) -> tuple[list[str], list[str]]:
    """What an operator can do with a task that has no outcome (running, or its worker died without one), and
    the commands of that path: a write whose effect is unknown is reconciled first, then the task is recovered."""
    reopen = f"reopen the task by a recorded decision: loopguard recover {task.task_id} --who W --why ..."
    if not unknown:  # marked: a live worker stops at its next dispatch; a dead one never will
        return (["recover"], [f"once no worker runs it, {reopen}"]) if task.stop_reason else (["stop"], [])
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
    return _pause(record, store)


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


def pending_pauses(store: Store) -> list[dict[str, Any]]:
    """The pauses waiting for a decision, oldest first, each with its task's current counters under ``task``.

    >>> from agents_loopguard import MemoryStore
    >>> pending_pauses(MemoryStore())
    []
    """
    waiting = []
    for record in store.pauses():
        if record.status != "pending":
            continue
        view = _pause(record, store)
        task = store.task(record.task_id)
        if task is not None:
            view["task"] = {"status": task.status, **_counters(task.budget, task.used)}
        else:
            view["task"] = None
        waiting.append(view)
    return waiting


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
    return _operation(record)


def task_record(store: Store, task_id: str) -> dict[str, Any]:
    """The task's stored recovery record, validated; StateError while it has no terminal outcome.

    >>> from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(2, 2), store=store, task_id="t1").finish(Status.STOPPED, Reason.SAME_CALL)
    >>> task_record(store, "t1")["allowed_next_actions"]
    ['deliver_verified', 'human_review', 'close']
    """
    return _record(_task(store, task_id)).to_dict()


# --- actions ------------------------------------------------------------------------------------------------------


def _unknown_writes(store: Store, task_id: str) -> list[str]:
    return [o.operation_id for o in store.operations(task_id) if o.state is OperationState.UNKNOWN]


def _stop_message(before: TaskSnapshot, after: TaskSnapshot, unknown: list[str]) -> str:
    mark = _text(after.stop_reason)
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
    before = _task(store, task_id)
    stored_reason = str(redact(reason)) if reason else "stop_requested"
    stopped = request_stop(store, task_id, reason=stored_reason, who=str(redact(who)), now=_now())
    after = stopped.task
    unknown = _unknown_writes(store, task_id)
    _log.info("stop mark on task %s by %s: %s", task_id, _text(who), stored_reason, extra={"task_id": task_id})
    return {
        "task_id": task_id,
        "status": after.status,
        "reason": (after.outcome or {}).get("reason"),
        "stop_mark": _text(after.stop_reason),
        "set_now": stopped.newly_set,
        "who": _text(who),
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
    view = _pause(record, store)
    view["message"] = (
        f"pause {record.pause_id} of task {record.task_id}: {decided}; the application's resume applies these decisions"
    )
    return view


def _answer(answer: OperationState | str) -> OperationState:
    try:
        return OperationState(answer)
    except ValueError:
        choices = ", ".join(s.value for s in OperationState)
        raise InputError(f"the receiver's answer {answer!r} is none of {choices}") from None


def _reconcile_message(operation_id: str, state: OperationState, task: TaskSnapshot | None, reopened: bool) -> str:
    if state is OperationState.UNKNOWN:
        return (
            f"operation {operation_id} stays unknown; nothing was recorded: query the receiver again with the "
            "operation id, or ask a human"
        )
    text = f"operation {operation_id}: {state}"
    if task is None:
        return text
    if reopened:
        return f"{text}; task {task.task_id} reopened (its counters are kept)"
    return f"{text}; task {task.task_id} stays {task.status}"


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
    done = reconcile(store, operation_id, state, who=who, why=why, result=result, correct=correct, now=_now())
    task_id = done.operation.task_id
    task = store.task(task_id)
    reopened = done.transition is not None
    return {
        "operation_id": operation_id,
        "state": str(done.operation.state),
        "operation": _operation(done.operation),
        "task_id": task_id,
        "task_status": task.status if task else None,
        "task_reopened": reopened,
        "reopened_tasks": [task_id] * reopened + list(done.reopened_elsewhere),
        "still_unknown": _unknown_writes(store, task_id),
        "transition": _transition(done.transition) if done.transition else None,
        "allowed_next_actions": [str(a) for a in done.allowed_next_actions],
        "message": _reconcile_message(operation_id, state, task, reopened),
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
    transition = recover(store, task_id, who=who, why=why, extend=extend, now=_now())
    after = _task(store, task_id)
    b, u = after.budget, after.used
    message = (
        f"task {task_id} reopened by {_text(who)}: limits now {_plural(b.model_turns, 'turn')} and "
        f"{_plural(b.tool_executions, 'tool execution')}; used so far {_plural(u.models, 'turn')} and "
        f"{_plural(u.tools, 'tool execution')}"
    )
    return {"task": _row(after), "transition": _transition(transition), "message": message + _other_limits(b, u)}


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
