"""The store's tables (SQLModel) and the conversions of rows to records.

The tables have their own metadata, so an application's ``SQLModel.metadata`` leaves them alone. Their version,
and what the store does with a database of another one, is :mod:`.schema`'s.
"""

from __future__ import annotations

import json
from typing import Any, cast

from sqlalchemy import BigInteger, Index, Integer, Table, Text
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from ...values.budget import Budget
from ...values.errors import StoreError
from ...values.outcome import Reason, Usage
from ..base import (
    Activation,
    OperationRecord,
    OperationState,
    PauseRecord,
    StepRecord,
    TaskSnapshot,
    TraceEntry,
    TransitionRecord,
)
from ..records import REOPENED
from ..rules import TaskState

__all__ = [
    "METADATA",
    "ActivationRow",
    "MetaRow",
    "OperationRow",
    "PauseRow",
    "RefusalRow",
    "RepetitionRow",
    "SeenRow",
    "StepRow",
    "TallyRow",
    "TaskRow",
    "ToolRunRow",
    "TraceRow",
    "TransitionRow",
]

# --- tables -----------------------------------------------------------------------------------------------------


class _Table(SQLModel, registry=registry()):
    """Base of the store's tables: their own metadata, so an application's ``SQLModel.metadata`` leaves them alone."""


_COMPACT = {"sqlite_with_rowid": False}
"""SQLite: a table keyed by text is one b-tree, not a rowid table plus a key index (fewer pages per commit)."""


def _big(**kwargs: Any) -> Any:
    return Field(sa_type=BigInteger, **kwargs)


def _json(**kwargs: Any) -> Any:
    return Field(default=None, sa_type=Text, **kwargs)


class MetaRow(_Table, table=True):
    """Facts about the database itself: ``schema_version``."""

    __tablename__ = "loopguard_meta"
    __table_args__ = _COMPACT
    key: str = Field(primary_key=True, max_length=64)
    value: str


def _pages(table: str, *keys: str, order: tuple[str, str] = ("created_at", "task_id")) -> tuple[Index, ...]:
    """The indexes an operator's page reads: the list's order, and each filter then that order (R22)."""
    return (
        Index(f"ix_{table}_{order[0]}", *order),
        *(Index(f"ix_{table}_{key}", key, *order) for key in keys),
    )


class TaskRow(_Table, table=True):
    """A task: its limits, counters, progress, stop mark and terminal outcome (the recovery record, as JSON).

    Its pages are read in creation order (``created_at``, ``task_id``: neither changes while the task runs, so a
    turn updates no page index) by status, reason or family."""

    __tablename__ = "loopguard_tasks"
    __table_args__ = (*_pages("loopguard_tasks", "status", "reason", "family"), _COMPACT)
    task_id: str = Field(primary_key=True)
    model_turns: int = _big()
    tool_executions: int = _big()
    deadline: float | None = None
    cost_limit: float | None = None
    models: int = _big(default=0)
    tools: int = _big(default=0)
    cost: float = 0.0
    input_token_limit: int | None = _big(default=None)
    output_token_limit: int | None = _big(default=None)
    total_token_limit: int | None = _big(default=None)
    input_tokens: int = _big(default=0)
    output_tokens: int = _big(default=0)
    revision: int = _big(default=0)
    stalled: int = _big(default=0)
    status: str = "running"
    stop_reason: str | None = None
    outcome: str | None = _json()
    trace_seq: int = _big(default=0)
    """The sequence number of the task's last trace entry (taken under the task row's lock)."""
    created_at: float = 0.0
    updated_at: float = 0.0
    family: str = Field(default="other", max_length=40)
    """The family its metrics are summed under (:mod:`agents_loopguard.values.families`); never changes."""
    reason: str | None = None
    """The reason of its outcome (None while it has none), for the pages and the tallies."""


class OperationRow(_Table, table=True):
    """The ledger: one business operation, unique by its id."""

    __tablename__ = "loopguard_operations"
    __table_args__ = (*_pages("loopguard_operations", "state", order=("created_at", "operation_id")), _COMPACT)
    operation_id: str = Field(primary_key=True)
    task_id: str = Field(index=True)
    tool: str
    payload: str
    state: str
    result: str | None = _json()
    attempts: int = _big(default=1)
    created_at: float = 0.0
    updated_at: float = 0.0


class TraceRow(_Table, table=True):
    """One guarded step of a task, in order (arguments as the engine redacted them)."""

    __tablename__ = "loopguard_trace"
    __table_args__ = _COMPACT
    task_id: str = Field(primary_key=True)
    seq: int = _big(primary_key=True)
    kind: str
    tool: str | None = None
    args: str | None = _json()
    result_class: str = ""
    revision: int = _big(default=0)
    models: int = _big(default=0)
    tools: int = _big(default=0)
    fingerprint: str | None = None
    operation_id: str | None = None
    operation_state: str | None = None
    at: float = 0.0


class RepetitionRow(_Table, table=True):
    """How many times a fingerprint executed at one revision of a task, and when it first did (for polls)."""

    __tablename__ = "loopguard_repetitions"
    __table_args__ = _COMPACT
    task_id: str = Field(primary_key=True)
    fingerprint: str = Field(primary_key=True)
    revision: int = _big(primary_key=True)
    count: int = _big(default=0)
    first_at: float = 0.0


class ToolRunRow(_Table, table=True):
    """How many times a tool executed in a task (counted for the reservations that name a per-tool limit)."""

    __tablename__ = "loopguard_tool_runs"
    __table_args__ = _COMPACT
    task_id: str = Field(primary_key=True)
    tool: str = Field(primary_key=True)
    count: int = _big(default=0)


class SeenRow(_Table, table=True):
    """A cursor or record id a task has seen (pagination cycles)."""

    __tablename__ = "loopguard_seen"
    __table_args__ = _COMPACT
    task_id: str = Field(primary_key=True)
    key: str = Field(primary_key=True)


class StepRow(_Table, table=True):
    """A durable engine's step as a task saw it (R17): how many times it began, and what the model read once it
    ended (a replay returns it)."""

    __tablename__ = "loopguard_steps"
    __table_args__ = _COMPACT
    task_id: str = Field(primary_key=True)
    step_key: str = Field(primary_key=True)
    attempts: int = _big(default=1)
    done: bool = False
    output: str | None = _json()
    updated_at: float = 0.0


class ActivationRow(_Table, table=True):
    """One activation of a workflow and its place in a re-entry chain."""

    __tablename__ = "loopguard_activations"
    __table_args__ = (Index("ix_loopguard_activations_created_at", "created_at"),)
    ordinal: int | None = Field(default=None, primary_key=True)
    activation_id: str = Field(unique=True)
    flow: str = Field(index=True)
    chain_id: str
    depth: int = _big(default=0)
    origin_operation_id: str | None = None
    granted: bool = True
    reason: str | None = None
    created_at: float = 0.0


class PauseRow(_Table, table=True):
    """An approval pause: the serialized run state with the task's budget and counters at that moment."""

    __tablename__ = "loopguard_pauses"
    __table_args__ = _pages("loopguard_pauses", "status", order=("created_at", "pause_id"))
    ordinal: int | None = Field(default=None, primary_key=True)
    pause_id: str = Field(unique=True)
    task_id: str = Field(index=True)
    status: str = "pending"
    state: str = Field(sa_type=Text)
    digest: str
    pending_calls: str = Field(sa_type=Text)
    model_turns: int = _big()
    tool_executions: int = _big()
    deadline: float | None = None
    cost_limit: float | None = None
    models: int = _big(default=0)
    tools: int = _big(default=0)
    cost: float = 0.0
    input_token_limit: int | None = _big(default=None)
    output_token_limit: int | None = _big(default=None)
    total_token_limit: int | None = _big(default=None)
    input_tokens: int = _big(default=0)
    output_tokens: int = _big(default=0)
    created_at: float = 0.0
    resumed_at: float | None = None
    resumed_by: str | None = None
    decisions: str = Field(default="{}", sa_type=Text)
    decided_by: str | None = None
    decisions_digest: str | None = None
    decided_why: str | None = Field(default=None, sa_type=Text)
    decided_at: float | None = None


class TransitionRow(_Table, table=True):
    """An explicit, recorded step that reopened a finished task."""

    __tablename__ = "loopguard_transitions"
    __table_args__ = _pages("loopguard_transitions", order=("at", "transition_id"))
    ordinal: int | None = Field(default=None, primary_key=True)
    transition_id: str = Field(unique=True)
    task_id: str = Field(index=True)
    kind: str
    who: str
    why: str = ""
    at: float = 0.0
    pause_id: str | None = None
    from_outcome: str | None = _json()
    decisions: str = Field(default="{}", sa_type=Text)
    budget_delta: str = Field(default="{}", sa_type=Text)
    operation_id: str | None = None


class TallyRow(_Table, table=True):
    """The ended tasks of a family, status and reason, with their budgets summed: kept by triggers on the task
    table as tasks end, reopen and are pruned, in the same transaction (the metrics read these rows, never every
    task). ``shard`` spreads one group over a few rows so workers that end tasks at once rarely wait on one row."""

    __tablename__ = "loopguard_tallies"
    __table_args__ = _COMPACT
    family: str = Field(primary_key=True, max_length=40)
    status: str = Field(primary_key=True)
    reason: str = Field(primary_key=True)
    shard: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    tasks: int = _big(default=0)
    models: int = _big(default=0)
    model_turns: int = _big(default=0)
    tools: int = _big(default=0)
    tool_executions: int = _big(default=0)


class RefusalRow(_Table, table=True):
    """Calls refused before they ran, by family and rule: counted by a trigger as the refusal is recorded (a prune
    of the trace leaves the count as it was)."""

    __tablename__ = "loopguard_refusals"
    __table_args__ = _COMPACT
    family: str = Field(primary_key=True, max_length=40)
    reason: str = Field(primary_key=True)
    shard: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    count: int = _big(default=0)


def _table(model: type[SQLModel]) -> Table:
    return cast(Table, model.__table__)  # type: ignore[attr-defined]


METADATA = _Table.metadata
meta = _table(MetaRow)
tasks = _table(TaskRow)
ops = _table(OperationRow)
trace = _table(TraceRow)
reps = _table(RepetitionRow)
seen = _table(SeenRow)
tool_runs = _table(ToolRunRow)
steps = _table(StepRow)
acts = _table(ActivationRow)
pauses = _table(PauseRow)
trans = _table(TransitionRow)
tallies = _table(TallyRow)
refusals = _table(RefusalRow)
# SQLite makes only an INTEGER PRIMARY KEY an auto-numbered rowid; PostgreSQL gets a serial.
for _t in (acts, pauses, trans):
    _t.c.ordinal.type = BigInteger().with_variant(Integer(), "sqlite")


# --- values in and out --------------------------------------------------------------------------------------------

encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def dumps(value: Any) -> str | None:
    return None if value is None else encode(value)


def loads(text: str | None) -> Any:
    """A stored JSON value; one that no longer parses (a damaged file) is a one-line :class:`StoreError`."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StoreError(f"the store holds a damaged JSON value ({exc}): restore the database from a backup") from None


def step_record(row: Any) -> StepRecord:
    return StepRecord(str(row["step_key"]), int(row["attempts"]), bool(row["done"]), loads(row["output"]))


def usage(row: Any, prefix: str = "") -> Usage:
    return Usage(
        int(row[prefix + "models"]),
        int(row[prefix + "tools"]),
        float(row[prefix + "cost"]),
        int(row[prefix + "input_tokens"]),
        int(row[prefix + "output_tokens"]),
    )


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def budget(row: Any) -> Budget:
    return Budget(
        int(row["model_turns"]),
        int(row["tool_executions"]),
        row["deadline"],
        row["cost_limit"],
        _count(row["input_token_limit"]),
        _count(row["output_token_limit"]),
        _count(row["total_token_limit"]),
    )


def task_state(row: Any) -> TaskState:
    """What the refusal rules read of a task row. A statement's row may carry only the limits its reservation
    checks (model turns, tool executions): the others are then read as absent, and no rule of that step reads them."""
    keys = set(row.keys())
    limits = Budget(
        int(row["model_turns"]),
        int(row["tool_executions"]),
        *(row[name] if name in keys else None for name in ("deadline", "cost_limit")),
        *(_count(row[name]) if name in keys else None for name in TOKEN_LIMIT_COLUMNS),
    )
    return TaskState(limits, usage(row), int(row["revision"]), row["status"], row["stop_reason"])


TOKEN_LIMIT_COLUMNS = ("input_token_limit", "output_token_limit", "total_token_limit")
"""The columns of a :class:`~agents_loopguard.Budget`'s token limits (input, output, total), in its order."""


def budget_params(limits: Budget) -> dict[str, Any]:
    """The bind values of a budget's limits, named as the task and pause columns."""
    return {
        "model_turns": limits.model_turns,
        "tool_executions": limits.tool_executions,
        "deadline": limits.deadline,
        "cost_limit": limits.cost,
        "input_token_limit": limits.input_tokens,
        "output_token_limit": limits.output_tokens,
        "total_token_limit": limits.total_tokens,
    }


def snapshot(row: Any) -> TaskSnapshot:
    return TaskSnapshot(
        task_id=row["task_id"],
        budget=budget(row),
        used=usage(row),
        revision=int(row["revision"]),
        stalled=int(row["stalled"]),
        status=row["status"],
        stop_reason=row["stop_reason"],
        outcome=loads(row["outcome"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        family=str(row["family"]),
        reopened=row["status"] == "running" and row["reason"] == REOPENED,
    )


def operation(row: Any, prefix: str = "") -> OperationRecord:
    return OperationRecord(
        operation_id=row[prefix + "operation_id"],
        task_id=row[prefix + "task_id"],
        tool=row[prefix + "tool"],
        payload=row[prefix + "payload"],
        state=OperationState(row[prefix + "state"]),
        result=loads(row[prefix + "result"]),
        attempts=int(row[prefix + "attempts"]),
        created_at=float(row[prefix + "created_at"]),
        updated_at=float(row[prefix + "updated_at"]),
    )


def trace_entry(row: Any) -> TraceEntry:
    return TraceEntry(
        kind=row["kind"],
        tool=row["tool"],
        args=loads(row["args"]),
        result_class=row["result_class"],
        revision=int(row["revision"]),
        models=int(row["models"]),
        tools=int(row["tools"]),
        fingerprint=row["fingerprint"],
        operation_id=row["operation_id"],
        operation_state=row["operation_state"],
        at=float(row["at"]),
        seq=int(row["seq"]),
    )


def activation(row: Any, *, duplicate: bool = False) -> Activation:
    return Activation(
        granted=bool(row["granted"]),
        activation_id=row["activation_id"],
        flow=row["flow"],
        chain_id=row["chain_id"],
        depth=int(row["depth"]),
        origin_operation_id=row["origin_operation_id"],
        reason=Reason(row["reason"]) if row["reason"] else None,
        duplicate=duplicate,
    )


def pause(row: Any) -> PauseRecord:
    return PauseRecord(
        pause_id=row["pause_id"],
        task_id=row["task_id"],
        status=row["status"],
        state=row["state"],
        digest=row["digest"],
        pending_calls=tuple(loads(row["pending_calls"])),
        budget=budget(row),
        used=usage(row),
        created_at=float(row["created_at"]),
        resumed_at=row["resumed_at"],
        resumed_by=row["resumed_by"],
        decisions=loads(row["decisions"]),
        decided_by=row["decided_by"],
        decisions_digest=row["decisions_digest"],
        decided_why=row["decided_why"] or "",
        decided_at=row["decided_at"],
    )


def transition(row: Any) -> TransitionRecord:
    return TransitionRecord(
        transition_id=row["transition_id"],
        task_id=row["task_id"],
        kind=row["kind"],
        who=row["who"],
        why=row["why"],
        at=float(row["at"]),
        pause_id=row["pause_id"],
        from_outcome=loads(row["from_outcome"]),
        decisions=loads(row["decisions"]),
        budget_delta=loads(row["budget_delta"]),
        operation_id=row["operation_id"],
    )


def trace_params(task_id: str, entry: TraceEntry) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "kind": entry.kind,
        "tool": entry.tool,
        "args": dumps(entry.args),
        "result_class": entry.result_class,
        "e_revision": entry.revision,
        "e_models": entry.models,
        "e_tools": entry.tools,
        "fingerprint": entry.fingerprint,
        "operation_id": entry.operation_id,
        "operation_state": entry.operation_state,
        "at": entry.at,
    }


def transition_params(t: TransitionRecord) -> dict[str, Any]:
    return {
        "transition_id": t.transition_id,
        "task_id": t.task_id,
        "kind": t.kind,
        "who": t.who,
        "why": t.why,
        "at": t.at,
        "pause_id": t.pause_id,
        "from_outcome": dumps(t.from_outcome),
        "decisions": encode(dict(t.decisions)),
        "budget_delta": encode(dict(t.budget_delta)),
        "operation_id": t.operation_id,
    }
