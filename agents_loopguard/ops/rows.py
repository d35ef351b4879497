"""The operators' data as plain JSON-ready values: a task's row, a step, an operation, a pause, a transition.

Numbers stay numbers, every timestamp is ISO 8601 UTC ending in ``Z`` (``None`` when the store holds none), stored
JSON (arguments, results, records) comes back as objects, and text that may hold a credential is redacted. The
views of :mod:`.operator` and the pages of :mod:`.pages` build their answers from these.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import time
from collections.abc import Mapping
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
from ..store.records import REOPENED
from ..values.budget import Budget
from ..values.canonical import redact
from ..values.errors import NotFoundError, StateError
from ..values.outcome import RecordError, RecoveryRecord, Usage
from .approvals import check_pause

__all__ = [
    "counters",
    "iso_time",
    "json_object",
    "now",
    "operation_row",
    "pause_row",
    "record_of",
    "redacted_text",
    "step_row",
    "task_of",
    "task_row",
    "transition_row",
]


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


def now() -> float:
    """The time the operator's actions record (seconds since the epoch)."""
    return time.time()


def counters(budget: Budget, used: Usage) -> dict[str, Any]:
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


def redacted_text(value: str | None) -> str | None:
    """Operator text (who, why, a stop reason) as shown: credentials redacted."""
    return None if value is None else str(redact(value))


def json_object(value: Any) -> Any:
    """A value stored as JSON text (a pending call's arguments) as the object it encodes; other text stays text."""
    if isinstance(value, (str, bytes)):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    return redact(value)


def task_row(task: TaskSnapshot) -> dict[str, Any]:
    outcome = task.outcome or {}
    return {
        "task_id": task.task_id,
        "status": REOPENED if task.reopened else task.status,
        "reason": outcome.get("reason"),
        "family": task.family,
        **counters(task.budget, task.used),
        "revision": task.revision,
        "stalled": task.stalled,
        "stop_mark": redacted_text(task.stop_reason),
        "created_at": iso_time(task.created_at),
        "updated_at": iso_time(task.updated_at),
    }


def step_row(entry: TraceEntry) -> dict[str, Any]:
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


def operation_row(op: OperationRecord) -> dict[str, Any]:
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


def transition_row(t: TransitionRecord) -> dict[str, Any]:
    return {
        "transition_id": t.transition_id,
        "task_id": t.task_id,
        "kind": t.kind,
        "who": redacted_text(t.who),
        "why": redacted_text(t.why),
        "at": iso_time(t.at),
        "pause_id": t.pause_id,
        "from_outcome": redact(t.from_outcome),
        "decisions": dict(t.decisions),
        "budget_delta": _delta(t.budget_delta),
        "operation_id": t.operation_id,
    }


def _digest_ok(record: PauseRecord) -> bool:
    try:
        check_pause(record)
    except StateError:
        return False
    return True


def _ledger_state(store: Store, operation_id: Any) -> OperationRecord | None:
    """The ledger's record of a pending call's operation (None when it has none: the call would be its first send)."""
    return store.lookup_operation(operation_id) if isinstance(operation_id, str) and operation_id else None


def _committed(op: OperationRecord | None) -> str | None:
    """What to tell the approver when the call's operation is already committed (nothing would run again)."""
    if op is None or op.state is not OperationState.COMMITTED:
        return None
    return (
        f"operation {op.operation_id!r} is already committed (by task {op.task_id!r}): approving runs nothing, "
        "the stored result is returned; rejecting does not undo it"
    )


def _unknown(op: OperationRecord | None) -> str | None:
    """What to tell the approver when the call's operation already has an unknown result (an earlier answer was
    lost): approving cannot send it (nothing may re-send an unknown write), so the resume ends needing
    reconciliation; the receiver's answer, recorded first, is what lets it go on."""
    if op is None or op.state is not OperationState.UNKNOWN:
        return None
    return (
        f"operation {op.operation_id!r} already has an unknown result (an earlier send by task {op.task_id!r} lost "
        "its answer): approving sends nothing and the resume ends needs_reconciliation/unknown_commit; ask the "
        f"receiver first and record its answer (loopguard reconcile {op.operation_id} committed|not_committed --who W)"
    )


def pause_row(record: PauseRecord, store: Store) -> dict[str, Any]:
    calls = [
        {
            "call_id": call.get("call_id"),
            "tool": call.get("tool"),
            "operation_id": call.get("operation_id"),
            "arguments": json_object(call.get("arguments")),
            "decision": record.decisions.get(str(call.get("call_id"))),
            "operation_state": str(op.state) if op is not None else None,
            "already_committed": _committed(op),
            "already_unknown": _unknown(op),
        }
        for call, op in ((c, _ledger_state(store, c.get("operation_id"))) for c in record.pending_calls)
    ]
    return {
        "pause_id": record.pause_id,
        "task_id": record.task_id,
        "status": record.status,
        "digest_ok": _digest_ok(record),
        "pending_calls": calls,
        **counters(record.budget, record.used),
        "decisions": dict(record.decisions),
        "decided_by": redacted_text(record.decided_by),
        "decided_why": redacted_text(record.decided_why),
        "decided_at": iso_time(record.decided_at),
        "resumed_by": redacted_text(record.resumed_by),
        "created_at": iso_time(record.created_at),
        "resumed_at": iso_time(record.resumed_at),
    }


def task_of(store: Store, task_id: str) -> TaskSnapshot:
    task = store.task(task_id)
    if task is None:
        raise NotFoundError(f"no task {task_id!r} in this store")
    return task


def record_of(task: TaskSnapshot) -> RecoveryRecord:
    """The task's stored recovery record; StateError when it has none yet or it is malformed."""
    if task.outcome is None:
        raise StateError(f"task {task.task_id!r} has no terminal outcome yet (status {task.status})")
    try:
        return RecoveryRecord.from_json(task.outcome)
    except RecordError as exc:
        raise StateError(f"task {task.task_id!r}: {exc}") from None
