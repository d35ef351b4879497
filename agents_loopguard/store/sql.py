"""A persistent, shared store on SQLModel tables: a SQLite file by default, PostgreSQL for many workers.

Every method is one atomic step, decided by the database and never by a read followed by a write:

- a reservation (model turn, tool execution, a write's execution together with its operation) is one conditional
  ``UPDATE ... WHERE`` (not stopped, running, under the limit) with ``RETURNING``, and the repetition count is an
  ``INSERT ... ON CONFLICT DO UPDATE ... WHERE count < :max RETURNING`` decided in the same transaction: when either
  refuses, nothing changes;
- the operation ledger relies on its primary key (``INSERT ... ON CONFLICT DO NOTHING``), so two workers can never
  reserve the same operation; the ``unknown`` reservation is committed before the tool runs;
- a pause is claimed by a conditional ``UPDATE`` on its status, so exactly one claimer wins.

On SQLite each step is one ``BEGIN IMMEDIATE`` transaction (the database's write lock is taken up front, so two
processes never deadlock upgrading a read lock); the file is in WAL mode with ``synchronous=FULL`` and a busy timeout,
so concurrent processes wait instead of failing. On PostgreSQL the hot steps are each *one* statement (the same
conditional pieces composed as data-modifying CTEs) run at ``REPEATABLE READ``, so a guarded read costs two round
trips and a guarded write two; a statement that lost a race to a concurrent one fails with a serialization error
and is retried from a fresh snapshot, so every step behaves as if the steps ran one at a time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy import BigInteger, Connection, Engine, Integer, Table, Text, event
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite as lite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from ..budget import Budget
from ..outcome import Reason, Usage
from .base import (
    MAX_CHAIN_WALK,
    Activation,
    Grant,
    InputError,
    NotFoundError,
    OperationClaim,
    OperationRecord,
    OperationState,
    PauseAlreadyResumed,
    PauseRecord,
    Progress,
    StateError,
    StopMark,
    Store,
    StoreError,
    TaskSnapshot,
    TraceEntry,
    TransitionRecord,
    WriteReservation,
)

__all__ = [
    "DEFAULT_URL",
    "ENV_URL",
    "SCHEMA_VERSION",
    "SQLStore",
    "database_url",
]

SCHEMA_VERSION = 1
"""The version of the tables below; a database that carries another one is refused with a message."""
ENV_URL = "LOOPGUARD_DATABASE_URL"
"""The environment variable read when :class:`SQLStore` gets no URL."""
DEFAULT_URL = "sqlite:///.loopguard/loopguard.db"
"""Used when neither an argument nor ``LOOPGUARD_DATABASE_URL`` names a database: a file under the working directory."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite step waits for another process's write lock before giving up."""
_SQLITE_BUSY_HANDLER_MS = 5
"""SQLite's own busy handler sleeps up to 100 ms between attempts, leaving the lock idle under contention; it waits
only this long, and the store retries ``BEGIN IMMEDIATE`` itself (sub-millisecond, jittered) until the timeout."""
SQLITE_SYNCHRONOUS = ("WRITES", "FULL", "EXTRA", "NORMAL")
"""Accepted ``?synchronous=`` values of a SQLite URL (WAL mode; none loses a commit when a process crashes):

* WRITES (the default): the commits that protect a write or record a decision (a write's ``unknown`` reservation,
  the ledger, the stop mark, outcomes, pauses, transitions, activations) are fsynced before the step returns, so a
  write's reservation survives a power loss before the tool runs; the hot-path counters of turns and reads commit
  without waiting for the disk, and a power loss may lose the last of them (never the ledger);
* FULL / EXTRA: every commit is fsynced (counters too), at about 4x the cost of a guarded read;
* NORMAL: no commit waits for the disk; a power loss may lose the last commits, a write's reservation included."""
_PG_RETRIES = 200
"""Attempts of one PostgreSQL step that keeps losing races (serialization failure, deadlock) before giving up."""

T = TypeVar("T")


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


class TaskRow(_Table, table=True):
    """A task: its limits, counters, progress, stop mark and terminal outcome (the recovery record, as JSON)."""

    __tablename__ = "loopguard_tasks"
    __table_args__ = _COMPACT
    task_id: str = Field(primary_key=True)
    model_turns: int = _big()
    tool_executions: int = _big()
    deadline: float | None = None
    cost_limit: float | None = None
    models: int = _big(default=0)
    tools: int = _big(default=0)
    cost: float = 0.0
    revision: int = _big(default=0)
    stalled: int = _big(default=0)
    status: str = "running"
    stop_reason: str | None = None
    outcome: str | None = _json()
    trace_seq: int = _big(default=0)
    """The sequence number of the task's last trace entry (taken under the task row's lock)."""
    created_at: float = 0.0
    updated_at: float = 0.0


class OperationRow(_Table, table=True):
    """The ledger: one business operation, unique by its id."""

    __tablename__ = "loopguard_operations"
    __table_args__ = _COMPACT
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


class SeenRow(_Table, table=True):
    """A cursor or record id a task has seen (pagination cycles)."""

    __tablename__ = "loopguard_seen"
    __table_args__ = _COMPACT
    task_id: str = Field(primary_key=True)
    key: str = Field(primary_key=True)


class ActivationRow(_Table, table=True):
    """One activation of a workflow and its place in a re-entry chain."""

    __tablename__ = "loopguard_activations"
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
    created_at: float = 0.0
    resumed_at: float | None = None
    resumed_by: str | None = None
    decisions: str = Field(default="{}", sa_type=Text)
    decided_by: str | None = None


class TransitionRow(_Table, table=True):
    """An explicit, recorded step that reopened a finished task."""

    __tablename__ = "loopguard_transitions"
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


def _table(model: type[SQLModel]) -> Table:
    return cast(Table, model.__table__)  # type: ignore[attr-defined]


METADATA = _Table.metadata
_meta = _table(MetaRow)
_tasks = _table(TaskRow)
_ops = _table(OperationRow)
_trace = _table(TraceRow)
_reps = _table(RepetitionRow)
_seen = _table(SeenRow)
_acts = _table(ActivationRow)
_pauses = _table(PauseRow)
_trans = _table(TransitionRow)
# SQLite makes only an INTEGER PRIMARY KEY an auto-numbered rowid; PostgreSQL gets a serial.
for _t in (_acts, _pauses, _trans):
    _t.c.ordinal.type = BigInteger().with_variant(Integer(), "sqlite")


# --- values in and out --------------------------------------------------------------------------------------------

_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def _dumps(value: Any) -> str | None:
    return None if value is None else _encode(value)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _usage(row: Any, prefix: str = "") -> Usage:
    return Usage(int(row[prefix + "models"]), int(row[prefix + "tools"]), float(row[prefix + "cost"]))


def _budget(row: Any) -> Budget:
    return Budget(int(row["model_turns"]), int(row["tool_executions"]), row["deadline"], row["cost_limit"])


def _snapshot(row: Any) -> TaskSnapshot:
    return TaskSnapshot(
        task_id=row["task_id"],
        budget=_budget(row),
        used=_usage(row),
        revision=int(row["revision"]),
        stalled=int(row["stalled"]),
        status=row["status"],
        stop_reason=row["stop_reason"],
        outcome=_loads(row["outcome"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def _operation(row: Any, prefix: str = "") -> OperationRecord:
    return OperationRecord(
        operation_id=row[prefix + "operation_id"],
        task_id=row[prefix + "task_id"],
        tool=row[prefix + "tool"],
        payload=row[prefix + "payload"],
        state=OperationState(row[prefix + "state"]),
        result=_loads(row[prefix + "result"]),
        attempts=int(row[prefix + "attempts"]),
        created_at=float(row[prefix + "created_at"]),
        updated_at=float(row[prefix + "updated_at"]),
    )


def _trace_entry(row: Any) -> TraceEntry:
    return TraceEntry(
        kind=row["kind"],
        tool=row["tool"],
        args=_loads(row["args"]),
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


def _activation(row: Any, *, duplicate: bool = False) -> Activation:
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


def _pause(row: Any) -> PauseRecord:
    return PauseRecord(
        pause_id=row["pause_id"],
        task_id=row["task_id"],
        status=row["status"],
        state=row["state"],
        digest=row["digest"],
        pending_calls=tuple(json.loads(row["pending_calls"])),
        budget=_budget(row),
        used=_usage(row),
        created_at=float(row["created_at"]),
        resumed_at=row["resumed_at"],
        resumed_by=row["resumed_by"],
        decisions=json.loads(row["decisions"]),
        decided_by=row["decided_by"],
    )


def _transition(row: Any) -> TransitionRecord:
    return TransitionRecord(
        transition_id=row["transition_id"],
        task_id=row["task_id"],
        kind=row["kind"],
        who=row["who"],
        why=row["why"],
        at=float(row["at"]),
        pause_id=row["pause_id"],
        from_outcome=_loads(row["from_outcome"]),
        decisions=json.loads(row["decisions"]),
        budget_delta=json.loads(row["budget_delta"]),
    )


def _trace_params(task_id: str, entry: TraceEntry) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "kind": entry.kind,
        "tool": entry.tool,
        "args": _dumps(entry.args),
        "result_class": entry.result_class,
        "e_revision": entry.revision,
        "e_models": entry.models,
        "e_tools": entry.tools,
        "fingerprint": entry.fingerprint,
        "operation_id": entry.operation_id,
        "operation_state": entry.operation_state,
        "at": entry.at,
    }


def _blocked(row: Any) -> Grant | None:
    """The stop-mark refusal of a task row (stop mark set, or the task finished), as MemoryStore words it."""
    if row["stop_reason"] is not None or row["status"] != "running":
        reason = row["stop_reason"]
        detail = f"stop mark: {reason}" if reason else f"task already {row['status']}"
        return Grant(False, Reason.STOP_REQUESTED, _usage(row), int(row["revision"]), detail)
    return None


def _execution_refusal(
    task: Any,
    count: int | None,
    first_at: float | None,
    *,
    max_repeats: int,
    now: float,
    poll: bool = False,
    max_wait: float | None = None,
) -> Grant | None:
    """Why an execution is refused, in MemoryStore's order: stop mark, repetition (or wait), tool budget.

    ``task`` and the repetition ``count``/``first_at`` are read in the transaction (or statement) that refused.
    Returns None when nothing refuses (the caller then retries: it lost a race).
    """
    refusal = _blocked(task)
    if refusal is not None:
        return refusal
    used, revision = _usage(task), int(task["revision"])
    n = int(count or 0)
    if n >= max_repeats:
        return Grant(False, Reason.WAIT_BUDGET if poll else Reason.SAME_CALL, used, revision)
    if max_wait is not None and n and first_at is not None and now - first_at >= max_wait:
        return Grant(False, Reason.WAIT_BUDGET, used, revision, "waited past max_wait")
    if used.tools >= int(task["tool_executions"]):
        return Grant(False, Reason.TOOL_BUDGET, used, revision)
    return None


def _bind(name: str, **kwargs: Any) -> sa.BindParameter[Any]:
    """A bind parameter of the store's statements (prefixed: SQLAlchemy reserves column names in INSERT/UPDATE)."""
    return sa.bindparam(f"b_{name}", **kwargs)


class _Compiled:
    """A statement compiled once for the store's dialect: its SQL text and the values of its constant parameters."""

    __slots__ = ("defaults", "sql")

    def __init__(self, sql: str, defaults: dict[str, Any]) -> None:
        self.sql = sql
        self.defaults = defaults

    def params(self, given: dict[str, Any]) -> dict[str, Any]:
        return {**self.defaults, **given} if self.defaults else given


class _Rollback(Exception):
    """Internal: end the transaction without its changes and answer ``value``."""

    def __init__(self, value: Any) -> None:
        super().__init__("rollback")
        self.value = value


class _LostRace(Exception):
    """Internal: a statement's outcome could not be classified from its snapshot; run it again."""


# --- URL --------------------------------------------------------------------------------------------------------


def database_url(url: str | URL | None = None) -> URL:
    """The database a :class:`SQLStore` uses: ``url``, else ``$LOOPGUARD_DATABASE_URL``, else :data:`DEFAULT_URL`.

    ``postgresql://`` and ``postgres://`` mean the psycopg 3 driver; SQLite needs a file (the in-process store is
    :class:`~agents_loopguard.store.memory.MemoryStore`).

    >>> database_url("postgres://app@db.internal/agents").render_as_string()
    'postgresql+psycopg://app@db.internal/agents'
    >>> database_url("sqlite:///var/loopguard.db").database
    'var/loopguard.db'
    """
    raw = url if url is not None else (os.environ.get(ENV_URL) or DEFAULT_URL)
    try:
        parsed = make_url(raw)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot parse the database URL: {exc}") from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            raise StoreError(
                f"PostgreSQL URLs use the psycopg 3 driver: write postgresql+psycopg://... (got {parsed.drivername})"
            )
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:") or str(parsed.database).startswith("file::memory:"):
            raise StoreError(
                "an in-memory SQLite database is private to one connection: use MemoryStore in one process, "
                "or a file URL such as sqlite:///.loopguard/loopguard.db"
            )
        return parsed
    raise StoreError(
        f"unsupported database {parsed.drivername!r}: use sqlite:///path/to/file.db or postgresql+psycopg://..."
    )


# --- the store ----------------------------------------------------------------------------------------------------


class SQLStore(Store):
    """A :class:`~agents_loopguard.store.base.Store` in a SQLite file or a PostgreSQL database, shared by workers.

    ``url`` is a SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``); without one,
    ``$LOOPGUARD_DATABASE_URL``, else ``sqlite:///.loopguard/loopguard.db`` under the working directory (created if
    missing; ``?synchronous=NORMAL`` trades the durability of the last commits on a power loss for speed). The
    tables are created on first use; a database written with another schema version is refused.
    Create one store per process (it keeps a connection per thread that uses it) and :meth:`close` it when done.
    Lists are oldest first: tasks and operations by creation time (ties by id), the others in insertion order.

    >>> import tempfile
    >>> from agents_loopguard import Budget
    >>> store = SQLStore(f"sqlite:///{tempfile.mkdtemp()}/lg.db")
    >>> _ = store.ensure_task("t1", Budget(model_turns=1, tool_executions=1))
    >>> store.reserve_turn("t1").granted, store.reserve_turn("t1").reason
    (True, <Reason.MODEL_BUDGET: 'model_budget'>)
    >>> store.close()
    """

    def __init__(self, url: str | URL | None = None, *, echo: bool = False) -> None:
        self.url = database_url(url)
        self.backend = self.url.get_backend_name()
        self._pg = self.backend == "postgresql"
        if self._pg:
            self._engine = sa.create_engine(
                self.url, echo=echo, hide_parameters=True, isolation_level="AUTOCOMMIT", pool_pre_ping=True
            )
            event.listen(self._engine, "connect", _pg_on_connect)
            self._insert: Callable[[Table], Any] = pg.insert
        else:
            if sqlite3.sqlite_version_info < (3, 35, 0):
                raise StoreError(
                    f"SQLite {sqlite3.sqlite_version} has no RETURNING: agents_loopguard needs SQLite >= 3.35 "
                    "(upgrade Python's sqlite3, or use PostgreSQL)"
                )
            self.synchronous = str(self.url.query.get("synchronous", "WRITES")).upper()
            if self.synchronous not in SQLITE_SYNCHRONOUS:
                raise StoreError(
                    f"synchronous={self.synchronous!r}: choose one of {', '.join(SQLITE_SYNCHRONOUS)} (default WRITES)"
                )
            self.url = self.url.difference_update_query(["synchronous"])
            Path(str(self.url.database)).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self._engine = sa.create_engine(
                self.url,
                echo=echo,
                hide_parameters=True,
                isolation_level="AUTOCOMMIT",
                paramstyle="named",
                connect_args={"timeout": _SQLITE_BUSY_HANDLER_MS / 1000, "check_same_thread": False},
            )
            base = "NORMAL" if self.synchronous == "WRITES" else self.synchronous
            event.listen(self._engine, "connect", functools.partial(_sqlite_on_connect, base))
            self._insert = lite.insert
        self._begin = "BEGIN" if self._pg else "BEGIN IMMEDIATE"
        self._fsync_some = not self._pg and self.synchronous == "WRITES"
        """SQLite WRITES mode: durable steps raise the connection to FULL for their own commit."""
        self._dbapi_error: type[Exception] = self._engine.dialect.loaded_dbapi.Error
        self._ready = False
        self._ready_lock = threading.Lock()
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._connections_lock = threading.Lock()
        self._build()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for inspection and tests; the store's statements are its own)."""
        return self._engine

    def close(self) -> None:
        """Close the store's connections. The store reconnects if used again."""
        with self._connections_lock:
            held, self._connections = self._connections, []
        for conn in held:
            with contextlib.suppress(SQLAlchemyError):  # a broken connection is closed anyway
                conn.close()
        self._local = threading.local()
        self._engine.dispose()

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLStore({self.url.render_as_string(hide_password=True)!r})"

    # --- statements, built once ---------------------------------------------------------------------------------

    def _build(self) -> None:
        ins = self._insert
        t, o, r = _tasks, _ops, _reps
        p = _bind
        c = self._compile
        running = sa.and_(t.c.task_id == p("task_id"), t.c.stop_reason.is_(None), t.c.status == "running")
        self.s_task = c(sa.select(t).where(t.c.task_id == p("task_id")))
        self.s_tasks = c(sa.select(t).order_by(t.c.created_at, t.c.task_id))
        self.s_task_insert = c(
            ins(t)
            .values(
                task_id=p("task_id"),
                model_turns=p("model_turns"),
                tool_executions=p("tool_executions"),
                deadline=p("deadline"),
                cost_limit=p("cost_limit"),
                revision=p("revision"),
                models=0,
                tools=0,
                cost=0.0,
                stalled=0,
                status="running",
                trace_seq=0,
                created_at=p("now"),
                updated_at=p("now"),
            )
            .on_conflict_do_nothing(index_elements=["task_id"])
        )
        counters = (t.c.revision, t.c.models, t.c.tools, t.c.cost)
        self.s_turn = c(
            sa.update(t)
            .where(running, t.c.models < t.c.model_turns)
            .values(models=t.c.models + 1, trace_seq=t.c.trace_seq + 1, updated_at=p("now"))
            .returning(*counters, t.c.trace_seq)
        )
        self.s_execution = c(
            sa.update(t)
            .where(running, t.c.tools < t.c.tool_executions)
            .values(tools=t.c.tools + 1, updated_at=p("now"))
            .returning(*counters)
        )
        repeat = ins(r).values(
            task_id=p("task_id"), fingerprint=p("fingerprint"), revision=p("revision"), count=1, first_at=p("now")
        )
        keys = ["task_id", "fingerprint", "revision"]
        self.s_repeat = c(
            repeat.on_conflict_do_update(
                index_elements=keys, set_={"count": r.c.count + 1}, where=r.c.count < p("max_repeats")
            ).returning(r.c.count)
        )
        self.s_repeat_wait = c(
            repeat.on_conflict_do_update(
                index_elements=keys,
                set_={"count": r.c.count + 1},
                where=sa.and_(r.c.count < p("max_repeats"), p("now", type_=sa.Float) - r.c.first_at < p("max_wait")),
            ).returning(r.c.count)
        )
        self.s_repeat_get = c(
            sa.select(r.c.count, r.c.first_at).where(
                r.c.task_id == p("task_id"), r.c.fingerprint == p("fingerprint"), r.c.revision == p("revision")
            )
        )
        self.s_cost = c(
            sa.update(t)
            .where(running, sa.or_(t.c.cost_limit.is_(None), t.c.cost + p("amount") <= t.c.cost_limit))
            .values(cost=t.c.cost + p("amount"))
            .returning(*counters)
        )
        settled = t.c.cost - p("reserved", type_=sa.Float) + p("actual", type_=sa.Float)
        self.s_settle = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(cost=sa.case((settled > 0, settled), else_=0.0))
            .returning(*counters)
        )
        self.s_trace_seq = c(
            sa.update(t).where(t.c.task_id == p("task_id")).values(trace_seq=t.c.trace_seq + 1).returning(t.c.trace_seq)
        )
        tr = _trace
        self.s_trace_insert = c(
            sa.insert(tr).values(
                task_id=p("task_id"),
                seq=p("seq"),
                kind=p("kind"),
                tool=p("tool"),
                args=p("args"),
                result_class=p("result_class"),
                revision=p("e_revision"),
                models=p("e_models"),
                tools=p("e_tools"),
                fingerprint=p("fingerprint"),
                operation_id=p("operation_id"),
                operation_state=p("operation_state"),
                at=p("at"),
            )
        )
        self.s_trace = c(sa.select(tr).where(tr.c.task_id == p("task_id")).order_by(tr.c.seq))
        # progress: revision = max(current, given); stall resets when it advanced, else stays (pending) or grows
        advanced = p("revision", type_=BigInteger) > t.c.revision
        progress_common = {"trace_seq": t.c.trace_seq + 1, "updated_at": p("at")}
        returning = (*counters, t.c.stalled, t.c.trace_seq)
        progress = {
            "none": sa.update(t).where(t.c.task_id == p("task_id")).values(**progress_common).returning(*returning),
            "pending": sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(
                revision=sa.case((advanced, p("revision")), else_=t.c.revision),
                stalled=sa.case((advanced, 0), else_=t.c.stalled),
                **progress_common,
            )
            .returning(*returning),
            "step": sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(
                revision=sa.case((advanced, p("revision")), else_=t.c.revision),
                stalled=sa.case((advanced, 0), else_=t.c.stalled + 1),
                **progress_common,
            )
            .returning(*returning),
        }
        self.s_progress = {mode: c(stmt) for mode, stmt in progress.items()}
        self.s_seen = c(
            ins(_seen).values(task_id=p("task_id"), key=p("key")).on_conflict_do_nothing().returning(_seen.c.key)
        )
        self.s_stop = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"), t.c.stop_reason.is_(None))
            .values(stop_reason=p("reason"), updated_at=p("now"))
            .returning(t)
        )
        self.s_finish = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"), t.c.outcome.is_(None))
            .values(outcome=p("outcome"), status=p("status"), updated_at=p("now"))
            .returning(t.c.outcome)
        )
        self.s_outcome = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(outcome=p("outcome"), status=p("status"), updated_at=p("now"))
        )
        # the ledger
        self.s_op = c(sa.select(o).where(o.c.operation_id == p("operation_id")))
        self.s_ops = c(sa.select(o).order_by(o.c.created_at, o.c.operation_id))
        self.s_ops_of = c(sa.select(o).where(o.c.task_id == p("task_id")).order_by(o.c.created_at, o.c.operation_id))
        self.s_op_insert = c(
            ins(o)
            .values(
                operation_id=p("operation_id"),
                task_id=p("task_id"),
                tool=p("tool"),
                payload=p("payload"),
                state=str(OperationState.UNKNOWN),
                result=None,
                attempts=1,
                created_at=p("now"),
                updated_at=p("now"),
            )
            .on_conflict_do_nothing(index_elements=["operation_id"])
            .returning(o)
        )
        self.s_op_reopen = c(
            sa.update(o)
            .where(
                o.c.operation_id == p("operation_id"),
                o.c.state == str(OperationState.NOT_COMMITTED),
                o.c.payload == p("payload"),
            )
            .values(state=str(OperationState.UNKNOWN), result=None, attempts=o.c.attempts + 1, updated_at=p("now"))
            .returning(o)
        )
        self.s_op_settle = c(
            sa.update(o)
            .where(o.c.operation_id == p("op_id"))
            .values(state=p("op_state"), result=p("op_result"), updated_at=p("at"))
        )
        self.s_op_reconcile = c(
            sa.update(o)
            .where(o.c.operation_id == p("operation_id"), o.c.state == str(OperationState.UNKNOWN))
            .values(state=p("state"), result=p("result"), updated_at=p("now"))
            .returning(o)
        )
        # activations, pauses, transitions
        a = _acts
        self.s_activation = c(sa.select(a).where(a.c.activation_id == p("activation_id")))
        self.s_activations = c(sa.select(a).order_by(a.c.ordinal))
        self.s_activations_of = c(sa.select(a).where(a.c.flow == p("flow")).order_by(a.c.ordinal))
        self.s_parent = c(
            sa.select(a.c.flow, a.c.chain_id, a.c.depth, a.c.origin_operation_id)
            .select_from(o.join(a, a.c.activation_id == o.c.task_id))
            .where(o.c.operation_id == p("origin"))
        )
        self.s_activation_insert = c(
            ins(a)
            .values(
                activation_id=p("activation_id"),
                flow=p("flow"),
                chain_id=p("chain_id"),
                depth=p("depth"),
                origin_operation_id=p("origin"),
                granted=p("granted"),
                reason=p("reason"),
                created_at=p("now"),
            )
            .on_conflict_do_nothing(index_elements=["activation_id"])
            .returning(a)
        )
        ps = _pauses
        self.s_pause = c(sa.select(ps).where(ps.c.pause_id == p("pause_id")))
        self.s_pauses = c(sa.select(ps).order_by(ps.c.ordinal))
        self.s_pauses_of = c(sa.select(ps).where(ps.c.task_id == p("task_id")).order_by(ps.c.ordinal))
        self.s_pause_insert = c(
            ins(ps)
            .from_select(
                [
                    "pause_id",
                    "task_id",
                    "status",
                    "state",
                    "digest",
                    "pending_calls",
                    "model_turns",
                    "tool_executions",
                    "deadline",
                    "cost_limit",
                    "models",
                    "tools",
                    "cost",
                    "created_at",
                    "decisions",
                ],
                sa.select(
                    p("pause_id", type_=sa.String),
                    t.c.task_id,
                    sa.literal("pending"),
                    p("state", type_=Text),
                    p("digest", type_=sa.String),
                    p("pending_calls", type_=Text),
                    t.c.model_turns,
                    t.c.tool_executions,
                    t.c.deadline,
                    t.c.cost_limit,
                    t.c.models,
                    t.c.tools,
                    t.c.cost,
                    p("now", type_=sa.Float),
                    sa.literal("{}"),
                ).where(t.c.task_id == p("task_id")),
            )
            .on_conflict_do_nothing(index_elements=["pause_id"])
            .returning(ps)
        )
        self.s_pause_decide = c(
            sa.update(ps)
            .where(ps.c.pause_id == p("pause_id"), ps.c.status == "pending")
            .values(status="decided", decisions=p("decisions"), decided_by=p("who"))
            .returning(ps)
        )
        self.s_pause_claim = c(
            sa.update(ps)
            .where(ps.c.pause_id == p("pause_id"), ps.c.status != "resumed")
            .values(status="resumed", resumed_at=p("now"), resumed_by=p("who"), decisions=p("decisions"))
            .returning(ps)
        )
        tn = _trans
        self.s_transitions = c(sa.select(tn).order_by(tn.c.ordinal))
        self.s_transitions_of = c(sa.select(tn).where(tn.c.task_id == p("task_id")).order_by(tn.c.ordinal))
        self.s_transition_insert = c(
            sa.insert(tn).values({col.name: p(col.name) for col in tn.c if col.name != "ordinal"})
        )
        self.s_reopen = c(
            sa.update(t).where(t.c.task_id == p("task_id")).values(outcome=None, status="running", updated_at=p("now"))
        )
        self.s_recover = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(
                model_turns=p("model_turns"),
                tool_executions=p("tool_executions"),
                deadline=p("deadline"),
                cost_limit=p("cost_limit"),
                stop_reason=sa.case((p("clear_stop", type_=sa.Boolean), None), else_=t.c.stop_reason),
                outcome=None,
                status="running",
                updated_at=p("now"),
            )
        )
        if self._pg:
            self._build_pg()

    def _build_pg(self) -> None:
        """The hot steps as one statement each (PostgreSQL runs data-modifying CTEs): one round trip per step."""
        c = self._compile
        T, OP, R, TR, S = (x.name for x in (_tasks, _ops, _reps, _trace, _seen))
        trace_cols = (
            "task_id, seq, kind, tool, args, result_class, revision, models, tools, fingerprint, operation_id, "
            "operation_state, at"
        )
        trace_vals = (
            ":kind, :tool, :args, :result_class, :e_revision, :e_models, :e_tools, :fingerprint, :operation_id, "
            ":operation_state, :at"
        )
        task_cols = "task_id, revision, models, tools, cost, model_turns, tool_executions, stop_reason, status"
        self.q_turn = c(
            sa.text(
                f"""
            WITH t AS (SELECT {task_cols} FROM {T} WHERE task_id = :task_id),
            u AS (
              UPDATE {T} SET models = models + 1, trace_seq = trace_seq + 1, updated_at = :now
              WHERE task_id = :task_id AND stop_reason IS NULL AND status = 'running' AND models < model_turns
              RETURNING task_id, revision, models, tools, cost, trace_seq),
            tr AS (
              INSERT INTO {TR} (task_id, seq, kind, result_class, revision, models, tools, at)
              SELECT task_id, trace_seq, 'model', 'reserved', revision, models, tools, :now FROM u)
            SELECT t.*, u.models AS g_models, u.tools AS g_tools, u.cost AS g_cost, u.revision AS g_revision
            FROM t LEFT JOIN u ON true
            """
            )
        )
        ok_task = "t.stop_reason IS NULL AND t.status = 'running' AND t.tools < t.tool_executions"

        def repeat(source: str, wait: bool) -> str:
            cond = f"{R}.count < :max_repeats" + (f" AND :now - {R}.first_at < :max_wait" if wait else "")
            return f"""
            r AS (
              INSERT INTO {R} (task_id, fingerprint, revision, count, first_at)
              SELECT task_id, :fingerprint, revision, 1, :now FROM {source}
              ON CONFLICT (task_id, fingerprint, revision) DO UPDATE SET count = {R}.count + 1 WHERE {cond}
              RETURNING task_id)"""

        tail = (
            "t.*, u.models AS g_models, u.tools AS g_tools, u.cost AS g_cost, u.revision AS g_revision, "
            "rep.count AS rep_count, rep.first_at AS rep_first_at"
        )
        rep_join = f"LEFT JOIN {R} rep ON rep.task_id = t.task_id AND rep.fingerprint = :fingerprint "
        rep_join += "AND rep.revision = t.revision"
        self.q_execution = {
            wait: c(
                sa.text(
                    f"""
                WITH t AS (SELECT {task_cols} FROM {T} WHERE task_id = :task_id),
                ok AS (SELECT task_id, revision FROM t WHERE {ok_task}),
                {repeat("ok", wait)},
                u AS (
                  UPDATE {T} SET tools = {T}.tools + 1, updated_at = :now FROM r WHERE {T}.task_id = r.task_id
                  RETURNING {T}.revision, {T}.models, {T}.tools, {T}.cost)
                SELECT {tail} FROM t LEFT JOIN u ON true {rep_join}
                """
                )
            )
            for wait in (False, True)
        }
        op_cols = "operation_id, task_id, tool, payload, state, result, attempts, created_at, updated_at"
        op_out = ", ".join(f"{{0}}.{col} AS {{1}}{col}" for col in op_cols.split(", "))
        self.q_write = c(
            sa.text(
                f"""
            WITH t AS (SELECT {task_cols} FROM {T} WHERE task_id = :task_id),
            o AS (SELECT {op_cols} FROM {OP} WHERE operation_id = :operation_id),
            ok AS (
              SELECT task_id, revision FROM t WHERE {ok_task}
              AND NOT EXISTS (SELECT 1 FROM o WHERE NOT (o.state = 'not_committed' AND o.payload = :fingerprint))),
            {repeat("ok", False)},
            ins AS (
              INSERT INTO {OP} ({op_cols})
              SELECT :operation_id, :task_id, :tool, :fingerprint, 'unknown', NULL, 1, :now, :now FROM r
              WHERE NOT EXISTS (SELECT 1 FROM o)
              ON CONFLICT (operation_id) DO NOTHING
              RETURNING {op_cols}),
            reo AS (
              UPDATE {OP} SET state = 'unknown', result = NULL, attempts = {OP}.attempts + 1, updated_at = :now FROM r
              WHERE {OP}.operation_id = :operation_id AND {OP}.state = 'not_committed' AND {OP}.payload = :fingerprint
              RETURNING {", ".join(f"{OP}.{col}" for col in op_cols.split(", "))}),
            c AS (SELECT * FROM ins UNION ALL SELECT * FROM reo),
            u AS (
              UPDATE {T} SET tools = tools + 1, updated_at = :now
              WHERE task_id = :task_id AND EXISTS (SELECT 1 FROM c)
              RETURNING {T}.revision, {T}.models, {T}.tools, {T}.cost)
            SELECT {tail}, (SELECT count(*) FROM r) AS repeated,
              {op_out.format("o", "o_")}, {op_out.format("c", "c_")}
            FROM (SELECT 1) one LEFT JOIN t ON true LEFT JOIN u ON true {rep_join}
            LEFT JOIN o ON true LEFT JOIN c ON true
            """
            )
        )
        self.q_task = c(
            sa.text(
                f"""
            WITH i AS (
              INSERT INTO {T} (task_id, model_turns, tool_executions, deadline, cost_limit, models, tools, cost,
                revision, stalled, status, trace_seq, created_at, updated_at)
              VALUES (:task_id, :model_turns, :tool_executions, :deadline, :cost_limit, 0, 0, 0.0,
                :revision, 0, 'running', 0, :now, :now)
              ON CONFLICT (task_id) DO NOTHING
              RETURNING *)
            SELECT * FROM i UNION ALL SELECT * FROM {T} WHERE task_id = :task_id AND NOT EXISTS (SELECT 1 FROM i)
            """
            )
        )
        self.q_finish = c(
            sa.text(
                f"""
            WITH u AS (
              UPDATE {T} SET outcome = :outcome, status = :status, updated_at = :now
              WHERE task_id = :task_id AND outcome IS NULL
              RETURNING outcome)
            SELECT outcome FROM u
            UNION ALL SELECT outcome FROM {T} WHERE task_id = :task_id AND NOT EXISTS (SELECT 1 FROM u)
            """
            )
        )
        self.q_trace = c(
            sa.text(
                f"""
            WITH u AS (UPDATE {T} SET trace_seq = trace_seq + 1 WHERE task_id = :task_id RETURNING task_id, trace_seq)
            INSERT INTO {TR} ({trace_cols}) SELECT task_id, trace_seq, {trace_vals} FROM u RETURNING seq
            """
            )
        )
        progress_set = {
            "none": "",
            "pending": """, revision = GREATEST(revision, :revision),
                stalled = CASE WHEN :revision > revision THEN 0 ELSE stalled END""",
            "step": """, revision = GREATEST(revision, :revision),
                stalled = CASE WHEN :revision > revision THEN 0 ELSE stalled + 1 END""",
        }
        self._q_record: dict[tuple[str, bool, bool], _Compiled] = {}
        for mode, sets in progress_set.items():
            for with_op in (False, True):
                for with_seen in (False, True):
                    parts = [
                        f"""u AS (
                          UPDATE {T} SET trace_seq = trace_seq + 1, updated_at = :at {sets}
                          WHERE task_id = :task_id
                          RETURNING task_id, revision, stalled, models, tools, cost, trace_seq)""",
                        f"""tr AS (INSERT INTO {TR} ({trace_cols}) SELECT task_id, trace_seq, {trace_vals} FROM u)""",
                    ]
                    if with_op:
                        parts.append(
                            f"""op AS (UPDATE {OP} SET state = :op_state, result = :op_result, updated_at = :at
                            FROM u WHERE {OP}.operation_id = :op_id)"""
                        )
                    fresh = "CAST(NULL AS text[])"
                    if with_seen:
                        parts.append(
                            f"""s AS (INSERT INTO {S} (task_id, key)
                            SELECT u.task_id, k FROM u, unnest(CAST(:keys AS text[])) AS k
                            ON CONFLICT DO NOTHING RETURNING key)"""
                        )
                        fresh = "ARRAY(SELECT key FROM s)"
                    self._q_record[(mode, with_op, with_seen)] = c(
                        sa.text("WITH " + ",\n".join(parts) + f"\nSELECT u.*, {fresh} AS fresh FROM u")
                    )

    # --- compiled statements, connections and transactions ------------------------------------------------------

    def _compile(self, stmt: sa.ClauseElement) -> _Compiled:
        """Compile ``stmt`` once for this dialect; its bind parameters are named as the steps' params name them."""
        compiled = stmt.compile(dialect=self._engine.dialect)
        sql = re.sub(r"(:|%\()b_(\w)", r"\1\2", compiled.string)
        defaults = {k: v for k, v in compiled.params.items() if not k.startswith("b_") and k in sql}
        return _Compiled(sql, defaults)

    def _cursor(self) -> Any:
        """This thread's DBAPI cursor on a connection kept open between steps (a pool checkout per step costs about
        as much as a SQLite step). A forked child never uses its parent's connection: it opens its own."""
        held: tuple[int, Connection, Any] | None = getattr(self._local, "held", None)
        pid = os.getpid()
        if held is not None and held[0] == pid and not held[1].closed and not held[1].invalidated:
            return held[2]
        if held is not None and held[0] != pid:
            self._engine.dispose(close=False)  # the parent's pooled connections stay the parent's
        try:
            conn = self._engine.connect()
        except SQLAlchemyError as exc:
            cause = getattr(exc, "orig", None) or exc
            raise StoreError(f"{self!r}: cannot connect: {str(cause).strip()}") from exc
        with self._connections_lock:
            self._connections.append(conn)
        if not self._ready:
            self._ensure_schema(conn)
        dbapi: Any = conn.connection.dbapi_connection
        if self._pg:
            from psycopg.rows import dict_row

            cursor = dbapi.cursor(row_factory=dict_row)
        else:
            cursor = dbapi.cursor()
            cursor.row_factory = sqlite3.Row
        self._local.held = (pid, conn, cursor)
        return cursor

    def _drop_connection(self) -> None:
        held: tuple[int, Connection, Any] | None = getattr(self._local, "held", None)
        self._local.held = None
        if held is None:
            return
        with self._connections_lock:
            if held[1] in self._connections:
                self._connections.remove(held[1])
        with contextlib.suppress(Exception):  # the connection is broken anyway
            held[1].invalidate()
            held[1].close()

    def _run(self, work: Callable[[Any], T], *, transaction: bool, durable: bool = False) -> T:
        """Run ``work(cursor)`` as one atomic step: in a transaction (``BEGIN IMMEDIATE`` on SQLite), or as the
        single statement it is (PostgreSQL autocommit at REPEATABLE READ). Retries a step that lost a race, and
        (SQLite) waits for the write lock of another process up to :data:`SQLITE_BUSY_TIMEOUT_MS`."""
        busy_until = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        attempt = 0
        while True:
            attempt += 1
            cur = self._cursor()
            began = False
            fsync = durable and transaction and self._fsync_some
            try:
                if fsync:
                    cur.execute("PRAGMA synchronous = FULL")  # this commit waits for the disk, and so all before it
                if transaction:
                    cur.execute(self._begin)
                    began = True
                result = work(cur)
                if began:
                    cur.execute("COMMIT")
                return result
            except _Rollback as stop:
                if began:
                    cur.execute("ROLLBACK")
                return cast(T, stop.value)
            except _LostRace:
                if began:
                    cur.execute("ROLLBACK")
            except self._dbapi_error as exc:
                self._abort(cur, began)
                if self._busy(exc, began) and time.monotonic() < busy_until:
                    time.sleep(0.001 * random.random())  # another process holds the write lock: try again soon
                    continue
                if not self._retryable(exc):
                    raise self._error(exc) from exc
            except BaseException:
                self._abort(cur, began)
                raise
            finally:
                if fsync:
                    with contextlib.suppress(self._dbapi_error):
                        cur.execute("PRAGMA synchronous = NORMAL")
            if attempt >= _PG_RETRIES:
                raise StoreError(f"{self!r}: a step kept losing races to concurrent workers ({attempt} attempts)")
            time.sleep(min(0.05, 0.0005 * attempt) * random.random())

    def _busy(self, exc: BaseException, began: bool) -> bool:
        """SQLite: the write lock (or a read of a file being checkpointed) was not free; nothing was changed."""
        return not self._pg and not began and getattr(exc, "sqlite_errorcode", None) in (5, 6)  # BUSY, LOCKED

    def _abort(self, cur: Any, began: bool) -> None:
        if self._pg and cur.connection.closed:
            self._drop_connection()
            return
        if began:
            try:
                cur.execute("ROLLBACK")
            except self._dbapi_error:
                self._drop_connection()

    def _retryable(self, exc: BaseException) -> bool:
        return self._pg and getattr(exc, "sqlstate", None) in ("40001", "40P01")  # serialization failure, deadlock

    def _error(self, exc: BaseException) -> StoreError:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if not self._pg and "locked" in text:
            return StoreError(
                f"{self!r}: the database stayed locked by another process for {SQLITE_BUSY_TIMEOUT_MS / 1000:.0f} s "
                f"({text}); check for a stuck process, or use PostgreSQL for many busy workers"
            )
        return StoreError(f"{self!r}: {type(exc).__name__}: {text}")

    def _read(self, work: Callable[[Any], T]) -> T:
        return self._run(work, transaction=False)

    def _write(self, work: Callable[[Any], T], *, durable: bool = False) -> T:
        return self._run(work, transaction=True, durable=durable)

    def _step(self, work: Callable[[Any], T], pg_work: Callable[[Any], T] | None = None, *, durable: bool = False) -> T:
        """A write step: one statement on PostgreSQL when ``pg_work`` is given, else a transaction.

        ``durable``: the step protects a write or records a decision (a write's ``unknown`` reservation, the ledger,
        the stop mark, an outcome, a pause, a transition): with SQLite's default ``synchronous=WRITES`` its commit is
        fsynced (which makes every earlier commit durable too); the other steps commit without waiting for the disk.
        """
        if self._pg and pg_work is not None:
            return self._run(pg_work, transaction=False)
        return self._run(work, transaction=True, durable=durable)

    @staticmethod
    def _x(cur: Any, stmt: _Compiled, params: dict[str, Any]) -> None:
        cur.execute(stmt.sql, stmt.params(params))

    @staticmethod
    def _one(cur: Any, stmt: _Compiled, params: dict[str, Any] | None = None) -> Any:
        cur.execute(stmt.sql, stmt.params(params or {}))
        rows = cur.fetchall()
        return rows[0] if rows else None

    @staticmethod
    def _all(cur: Any, stmt: _Compiled, params: dict[str, Any] | None = None) -> list[Any]:
        cur.execute(stmt.sql, stmt.params(params or {}))
        return list(cur.fetchall())

    # --- schema -----------------------------------------------------------------------------------------------------

    def _ensure_schema(self, conn: Connection) -> None:
        with self._ready_lock:
            if self._ready:
                return
            version = self._schema_version(conn)
            if version is None:
                version = self._create_schema(conn)
            if version != str(SCHEMA_VERSION):
                raise StoreError(
                    f"{self!r} holds agents_loopguard schema version {version}, but this agents_loopguard uses "
                    f"version {SCHEMA_VERSION}. Point the store (or ${ENV_URL}) at a new database, or, once no "
                    "task or operation in it is unfinished, drop its loopguard_* tables to let them be recreated"
                )
            self._ready = True

    def _schema_version(self, conn: Connection) -> str | None:
        try:
            value = conn.execute(sa.select(_meta.c.value).where(_meta.c.key == "schema_version")).scalar()
        except DBAPIError:
            return None  # no meta table yet
        return None if value is None else str(value)

    def _begin_when_free(self, conn: Connection) -> None:
        """SQLite: ``BEGIN IMMEDIATE``, waiting for another process's write lock up to the busy timeout."""
        busy_until = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                conn.exec_driver_sql(self._begin)
                return
            except DBAPIError as exc:
                if exc.orig is None or not self._busy(exc.orig, False) or time.monotonic() > busy_until:
                    raise
                time.sleep(0.001 * random.random())

    def _create_schema(self, conn: Connection) -> str:
        try:
            if self._pg:  # concurrent first use by several workers: one creates, the others wait, then see it
                conn.exec_driver_sql("BEGIN ISOLATION LEVEL READ COMMITTED")  # each statement sees the latest
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7295810394)")
            else:
                self._begin_when_free(conn)
            METADATA.create_all(conn, checkfirst=True)
            conn.execute(
                self._insert(_meta)
                .values(key="schema_version", value=str(SCHEMA_VERSION))
                .on_conflict_do_nothing(index_elements=["key"])
            )
            value = conn.execute(sa.select(_meta.c.value).where(_meta.c.key == "schema_version")).scalar_one()
            conn.exec_driver_sql("COMMIT")
        except DBAPIError as exc:
            with contextlib.suppress(DBAPIError):
                conn.exec_driver_sql("ROLLBACK")
            raise StoreError(f"{self!r}: cannot create the loopguard tables: {exc.orig}") from exc
        return str(value)

    # --- tasks and counters -----------------------------------------------------------------------------------------

    def _get_task(self, cur: Any, task_id: str) -> Any:
        row = self._one(cur, self.s_task, {"task_id": task_id})
        if row is None:
            raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
        return row

    def ensure_task(self, task_id: str, budget: Budget, *, revision: int = 0, now: float = 0.0) -> TaskSnapshot:
        params = {
            "task_id": task_id,
            "model_turns": budget.model_turns,
            "tool_executions": budget.tool_executions,
            "deadline": budget.deadline,
            "cost_limit": budget.cost,
            "revision": revision,
            "now": now,
        }

        def work(cur: Any) -> TaskSnapshot:
            self._x(cur, self.s_task_insert, params)
            return _snapshot(self._get_task(cur, task_id))

        def pg_work(cur: Any) -> TaskSnapshot:
            row = self._one(cur, self.q_task, params)
            if row is None:
                raise _LostRace  # created by another worker after this statement's snapshot
            return _snapshot(row)

        return self._step(work, pg_work)

    def task(self, task_id: str) -> TaskSnapshot | None:
        row = self._read(lambda cur: self._one(cur, self.s_task, {"task_id": task_id}))
        return _snapshot(row) if row is not None else None

    def tasks(self) -> list[TaskSnapshot]:
        return [_snapshot(row) for row in self._read(lambda cur: self._all(cur, self.s_tasks))]

    def _before_own_increment(self, cur: Any, task_id: str) -> dict[str, Any]:
        """The task row as it was before this transaction counted one execution (about to be rolled back)."""
        task = dict(self._get_task(cur, task_id))
        task["tools"] -= 1
        return task

    def _turn_refusal(self, row: Any) -> Grant:
        refusal = _blocked(row)
        if refusal is not None:
            return refusal
        if int(row["models"]) >= int(row["model_turns"]):
            return Grant(False, Reason.MODEL_BUDGET, _usage(row), int(row["revision"]))
        raise _LostRace

    def reserve_turn(self, task_id: str, *, now: float = 0.0) -> Grant:
        params = {"task_id": task_id, "now": now}

        def work(cur: Any) -> Grant:
            row = self._one(cur, self.s_turn, params)
            if row is None:
                raise _Rollback(self._turn_refusal(self._get_task(cur, task_id)))
            used = _usage(row)
            self._x(
                cur,
                self.s_trace_insert,
                {
                    "task_id": task_id,
                    "seq": row["trace_seq"],
                    "kind": "model",
                    "tool": None,
                    "args": None,
                    "result_class": "reserved",
                    "e_revision": row["revision"],
                    "e_models": used.models,
                    "e_tools": used.tools,
                    "fingerprint": None,
                    "operation_id": None,
                    "operation_state": None,
                    "at": now,
                },
            )
            return Grant(True, None, used, int(row["revision"]))

        def pg_work(cur: Any) -> Grant:
            row = self._one(cur, self.q_turn, params)
            if row is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
            if row["g_models"] is None:
                return self._turn_refusal(row)
            return Grant(True, None, _usage(row, "g_"), int(row["g_revision"]))

        return self._step(work, pg_work)

    def reserve_execution(
        self,
        task_id: str,
        fingerprint: str,
        *,
        max_repeats: int,
        now: float = 0.0,
        max_wait: float | None = None,
        poll: bool = False,
    ) -> Grant:
        wait = max_wait if poll else None
        params = {
            "task_id": task_id,
            "fingerprint": fingerprint,
            "max_repeats": max_repeats,
            "now": now,
            "max_wait": wait,
        }

        def refusal(cur: Any, task: Any) -> Grant:
            rep = self._one(cur, self.s_repeat_get, {**params, "revision": task["revision"]})
            count, first_at = (rep["count"], rep["first_at"]) if rep is not None else (None, None)
            found = _execution_refusal(
                task, count, first_at, max_repeats=max_repeats, now=now, poll=poll, max_wait=wait
            )
            if found is None:
                raise _LostRace
            return found

        def work(cur: Any) -> Grant:
            if max_repeats < 1:
                raise _Rollback(refusal(cur, self._get_task(cur, task_id)))
            row = self._one(cur, self.s_execution, params)
            if row is None:
                raise _Rollback(refusal(cur, self._get_task(cur, task_id)))
            stmt = self.s_repeat_wait if wait is not None else self.s_repeat
            if self._one(cur, stmt, {**params, "revision": row["revision"]}) is None:
                raise _Rollback(refusal(cur, self._before_own_increment(cur, task_id)))
            return Grant(True, None, _usage(row), int(row["revision"]))

        def pg_work(cur: Any) -> Grant:
            if max_repeats < 1:
                return refusal(cur, self._get_task(cur, task_id))
            row = self._one(cur, self.q_execution[wait is not None], params)
            if row is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
            if row["g_tools"] is not None:
                return Grant(True, None, _usage(row, "g_"), int(row["g_revision"]))
            found = _execution_refusal(
                row, row["rep_count"], row["rep_first_at"], max_repeats=max_repeats, now=now, poll=poll, max_wait=wait
            )
            if found is None:
                raise _LostRace
            return found

        return self._step(work, pg_work)

    def reserve_write(
        self,
        task_id: str,
        operation_id: str,
        fingerprint: str,
        tool: str,
        *,
        max_repeats: int,
        now: float = 0.0,
    ) -> WriteReservation:
        params = {
            "task_id": task_id,
            "operation_id": operation_id,
            "fingerprint": fingerprint,
            "payload": fingerprint,
            "tool": tool,
            "max_repeats": max_repeats,
            "now": now,
        }

        def refusal(cur: Any, task: Any) -> Grant:
            rep = self._one(cur, self.s_repeat_get, {**params, "revision": task["revision"]})
            count = rep["count"] if rep is not None else None
            found = _execution_refusal(task, count, None, max_repeats=max_repeats, now=now)
            if found is None:
                raise _LostRace
            return found

        def blocks(record: Any, prefix: str = "") -> bool:
            """True when the operation in the ledger may not run again (anything but a same-payload retry)."""
            return not (
                record[prefix + "state"] == str(OperationState.NOT_COMMITTED)
                and record[prefix + "payload"] == fingerprint
            )

        def work(cur: Any) -> WriteReservation:
            # The operation first, by its primary key: a new id is inserted as unknown (rolled back if refused).
            claimed = self._one(cur, self.s_op_insert, params)
            if claimed is None:
                claimed = self._one(cur, self.s_op_reopen, params)  # a verified non-execution, same payload
                if claimed is None:
                    existing = self._one(cur, self.s_op, params)
                    if existing is None:
                        raise _LostRace
                    raise _Rollback(WriteReservation(None, OperationClaim(False, _operation(existing))))
            if max_repeats < 1:
                raise _Rollback(WriteReservation(refusal(cur, self._get_task(cur, task_id)), None))
            row = self._one(cur, self.s_execution, params)
            if row is None:
                raise _Rollback(WriteReservation(refusal(cur, self._get_task(cur, task_id)), None))
            if self._one(cur, self.s_repeat, {**params, "revision": row["revision"]}) is None:
                raise _Rollback(WriteReservation(refusal(cur, self._before_own_increment(cur, task_id)), None))
            grant = Grant(True, None, _usage(row), int(row["revision"]))
            return WriteReservation(grant, OperationClaim(True, _operation(claimed)))

        def pg_work(cur: Any) -> WriteReservation:
            if max_repeats < 1:
                existing = self._one(cur, self.s_op, params)
                if existing is not None and blocks(existing):
                    return WriteReservation(None, OperationClaim(False, _operation(existing)))
                return WriteReservation(refusal(cur, self._get_task(cur, task_id)), None)
            row = self._one(cur, self.q_write, params)
            if row["o_operation_id"] is not None and blocks(row, "o_"):
                return WriteReservation(None, OperationClaim(False, _operation(row, "o_")))
            if row["task_id"] is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
            if row["g_tools"] is not None and row["c_operation_id"] is not None:
                grant = Grant(True, None, _usage(row, "g_"), int(row["g_revision"]))
                return WriteReservation(grant, OperationClaim(True, _operation(row, "c_")))
            if row["repeated"]:  # pragma: no cover - REPEATABLE READ turns this race into a serialization failure
                raise StoreError(f"reserve_write({operation_id!r}): counted a repetition without a claim")
            found = _execution_refusal(row, row["rep_count"], None, max_repeats=max_repeats, now=now)
            if found is None:
                raise _LostRace
            return WriteReservation(found, None)

        return self._step(work, pg_work, durable=True)

    def reserve_cost(self, task_id: str, amount: float) -> Grant:
        params = {"task_id": task_id, "amount": amount}

        def work(cur: Any) -> Grant:
            row = self._one(cur, self.s_cost, params)
            if row is not None:
                return Grant(True, None, _usage(row), int(row["revision"]))
            task = self._get_task(cur, task_id)
            return _blocked(task) or Grant(False, Reason.COST_BUDGET, _usage(task), int(task["revision"]))

        return self._write(work)

    def settle_cost(self, task_id: str, reserved: float, actual: float) -> Usage:
        params = {"task_id": task_id, "reserved": reserved, "actual": actual}

        def work(cur: Any) -> Usage:
            row = self._one(cur, self.s_settle, params)
            if row is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
            return _usage(row)

        return self._step(work, work)

    # --- the operation ledger ---------------------------------------------------------------------------------------

    def lookup_operation(self, operation_id: str) -> OperationRecord | None:
        row = self._read(lambda cur: self._one(cur, self.s_op, {"operation_id": operation_id}))
        return _operation(row) if row is not None else None

    def reserve_operation(
        self, task_id: str, operation_id: str, payload: str, tool: str, *, now: float = 0.0
    ) -> OperationClaim:
        params = {"task_id": task_id, "operation_id": operation_id, "payload": payload, "tool": tool, "now": now}

        def work(cur: Any) -> OperationClaim:
            row = self._one(cur, self.s_op_insert, params)
            if row is None:
                row = self._one(cur, self.s_op_reopen, params)
            if row is not None:
                return OperationClaim(True, _operation(row))
            existing = self._one(cur, self.s_op, params)
            if existing is None:
                raise _LostRace
            return OperationClaim(False, _operation(existing))

        return self._write(work, durable=True)

    def operations(self, task_id: str | None = None) -> list[OperationRecord]:
        if task_id is None:
            rows = self._read(lambda cur: self._all(cur, self.s_ops))
        else:
            rows = self._read(lambda cur: self._all(cur, self.s_ops_of, {"task_id": task_id}))
        return [_operation(row) for row in rows]

    def reconcile_operation(
        self, operation_id: str, state: OperationState, result: Any = None, *, now: float = 0.0
    ) -> OperationRecord:
        state = OperationState(state)
        params = {"operation_id": operation_id, "state": str(state), "result": _dumps(result), "now": now}

        def work(cur: Any) -> OperationRecord:
            if state is not OperationState.UNKNOWN:
                row = self._one(cur, self.s_op_reconcile, params)
                if row is not None:
                    return _operation(row)
            old = self._one(cur, self.s_op, params)
            if old is None:
                raise NotFoundError(f"unknown operation {operation_id!r}")
            if old["state"] != str(OperationState.UNKNOWN):
                raise StateError(f"operation {operation_id!r} is {old['state']}, not unknown: nothing to reconcile")
            if state is OperationState.UNKNOWN:
                return _operation(old)
            raise _LostRace

        return self._write(work, durable=True)

    # --- results and progress -----------------------------------------------------------------------------------------

    def record_execution(
        self,
        task_id: str,
        entry: TraceEntry,
        *,
        revision: int | None,
        pending: bool = False,
        operation: tuple[str, OperationState, Any] | None = None,
        seen: Sequence[str] = (),
    ) -> Progress:
        mode = "none" if revision is None else ("pending" if pending else "step")
        params = _trace_params(task_id, entry)
        params["revision"] = revision
        if operation is not None:
            op_id, op_state, op_result = operation
            params.update(op_id=op_id, op_state=str(OperationState(op_state)), op_result=_dumps(op_result))
        keys = list(dict.fromkeys(seen))
        params["keys"] = keys

        def work(cur: Any) -> Progress:
            row = self._one(cur, self.s_progress[mode], params)
            if row is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
            self._x(cur, self.s_trace_insert, {**params, "seq": row["trace_seq"]})
            if operation is not None:
                self._x(cur, self.s_op_settle, params)
            fresh = {k for k in keys if self._one(cur, self.s_seen, {"task_id": task_id, "key": k}) is not None}
            return Progress(int(row["revision"]), int(row["stalled"]), tuple(k not in fresh for k in seen), _usage(row))

        def pg_work(cur: Any) -> Progress:
            row = self._one(cur, self._q_record[(mode, operation is not None, bool(keys))], params)
            if row is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
            fresh = set(row["fresh"] or ())
            return Progress(int(row["revision"]), int(row["stalled"]), tuple(k not in fresh for k in seen), _usage(row))

        return self._step(work, pg_work)

    def append_trace(self, task_id: str, entry: TraceEntry) -> None:
        params = _trace_params(task_id, entry)

        def work(cur: Any) -> None:
            row = self._one(cur, self.s_trace_seq, params)
            if row is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
            self._x(cur, self.s_trace_insert, {**params, "seq": row["trace_seq"]})

        def pg_work(cur: Any) -> None:
            if self._one(cur, self.q_trace, params) is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")

        self._step(work, pg_work)

    def trace(self, task_id: str) -> list[TraceEntry]:
        def work(cur: Any) -> list[Any]:
            rows = self._all(cur, self.s_trace, {"task_id": task_id})
            if not rows:
                self._get_task(cur, task_id)
            return rows

        return [_trace_entry(row) for row in self._read(work)]

    # --- stop mark and terminal outcome -----------------------------------------------------------------------------

    def set_stop_mark(
        self, task_id: str, reason: str = "stop_requested", *, who: str | None = None, now: float = 0.0
    ) -> StopMark:
        stored = reason or "stop_requested"
        params = {"task_id": task_id, "reason": stored, "now": now}

        def work(cur: Any) -> StopMark:
            row = self._one(cur, self.s_stop, params)  # only a task without a mark: the first mark wins
            if row is None:
                return StopMark(_snapshot(self._get_task(cur, task_id)), False)
            snapshot = _snapshot(row)
            if who is not None:
                stop = TransitionRecord(
                    f"tr-{uuid.uuid4().hex[:12]}", task_id, "stop", who, stored, now, None, snapshot.outcome
                )
                self._x(cur, self.s_transition_insert, _transition_params(stop))
            return StopMark(snapshot, True)

        return self._write(work, durable=True)

    def finish(self, task_id: str, record: dict[str, Any], *, now: float = 0.0) -> dict[str, Any]:
        params = {
            "task_id": task_id,
            "outcome": _dumps(record),
            "status": str(record.get("status", "stopped")),
            "now": now,
        }

        def work(cur: Any) -> dict[str, Any]:
            row = self._one(cur, self.s_finish, params)
            stored = row["outcome"] if row is not None else self._get_task(cur, task_id)["outcome"]
            return cast(dict[str, Any], _loads(stored))

        def pg_work(cur: Any) -> dict[str, Any]:
            row = self._one(cur, self.q_finish, params)
            if row is None:
                raise NotFoundError(f"unknown task {task_id!r}: call ensure_task first")
            return cast(dict[str, Any], _loads(row["outcome"]))

        return self._step(work, pg_work, durable=True)

    # --- workflow re-entry --------------------------------------------------------------------------------------------

    def activate(
        self,
        flow: str,
        activation_id: str,
        *,
        origin_operation_id: str | None,
        max_depth: int,
        now: float = 0.0,
    ) -> Activation:
        def work(cur: Any) -> Activation:
            seen = self._one(cur, self.s_activation, {"activation_id": activation_id})
            if seen is not None:
                return _activation(seen, duplicate=True)
            chain_id, depth = activation_id, 0
            node = self._one(cur, self.s_parent, {"origin": origin_operation_id}) if origin_operation_id else None
            if node is not None:
                chain_id = node["chain_id"]
            for _ in range(MAX_CHAIN_WALK):  # the chain's ancestry: earlier activations of this flow are re-entries
                if node is None:
                    break
                depth += node["flow"] == flow
                origin = node["origin_operation_id"]
                node = self._one(cur, self.s_parent, {"origin": origin}) if origin else None
            granted = depth <= max_depth
            row = self._one(
                cur,
                self.s_activation_insert,
                {
                    "activation_id": activation_id,
                    "flow": flow,
                    "chain_id": chain_id,
                    "depth": depth,
                    "origin": origin_operation_id,
                    "granted": granted,
                    "reason": None if granted else str(Reason.TRIGGER_CHAIN),
                    "now": now,
                },
            )
            if row is None:
                raise _LostRace  # delivered twice at once: the other insert won; read it as a duplicate
            return _activation(row)

        return self._write(work, durable=True)

    def activations(self, flow: str | None = None) -> list[Activation]:
        if flow is None:
            rows = self._read(lambda cur: self._all(cur, self.s_activations))
        else:
            rows = self._read(lambda cur: self._all(cur, self.s_activations_of, {"flow": flow}))
        return [_activation(row) for row in rows]

    # --- approval pauses and transitions ----------------------------------------------------------------------------

    def save_pause(
        self,
        task_id: str,
        pause_id: str,
        state: str,
        pending_calls: Sequence[dict[str, Any]],
        *,
        digest: str,
        outcome: dict[str, Any],
        now: float = 0.0,
    ) -> PauseRecord:
        params = {
            "task_id": task_id,
            "pause_id": pause_id,
            "state": state,
            "digest": digest,
            "pending_calls": _encode(list(pending_calls)),
            "now": now,
            "outcome": _dumps(outcome),
            "status": str(outcome.get("status", "needs_human")),
        }

        def work(cur: Any) -> PauseRecord:
            row = self._one(cur, self.s_pause_insert, params)
            if row is None:
                self._get_task(cur, task_id)
                raise InputError(f"pause {pause_id!r} already exists")
            self._x(cur, self.s_outcome, params)
            return _pause(row)

        return self._write(work, durable=True)

    def pause(self, pause_id: str) -> PauseRecord | None:
        row = self._read(lambda cur: self._one(cur, self.s_pause, {"pause_id": pause_id}))
        return _pause(row) if row is not None else None

    def pauses(self, task_id: str | None = None) -> list[PauseRecord]:
        if task_id is None:
            rows = self._read(lambda cur: self._all(cur, self.s_pauses))
        else:
            rows = self._read(lambda cur: self._all(cur, self.s_pauses_of, {"task_id": task_id}))
        return [_pause(row) for row in rows]

    def decide_pause(
        self, pause_id: str, *, who: str, decisions: dict[str, str], why: str = "", now: float = 0.0
    ) -> PauseRecord:
        params = {"pause_id": pause_id, "who": who, "decisions": _encode(dict(decisions))}

        def work(cur: Any) -> PauseRecord:
            row = self._one(cur, self.s_pause_decide, params)
            if row is not None:
                return _pause(row)
            old = self._one(cur, self.s_pause, params)
            if old is None:
                raise NotFoundError(f"unknown pause {pause_id!r}")
            by = old["decided_by"] or old["resumed_by"]
            raise PauseAlreadyResumed(f"pause {pause_id!r} is {old['status']} (by {by!r}): its decisions are final")

        return self._write(work, durable=True)

    def claim_pause(
        self, pause_id: str, *, who: str, decisions: dict[str, str] | None = None, why: str = "", now: float = 0.0
    ) -> tuple[PauseRecord, TransitionRecord]:
        def work(cur: Any) -> tuple[PauseRecord, TransitionRecord]:
            old = self._one(cur, self.s_pause, {"pause_id": pause_id})
            if old is None:
                raise NotFoundError(f"unknown pause {pause_id!r}")
            if old["status"] == "resumed":
                raise PauseAlreadyResumed(
                    f"pause {pause_id!r} was already resumed by {old['resumed_by']!r}: a pause resumes at most once"
                )
            if decisions is None and old["status"] != "decided":
                raise StateError(f"pause {pause_id!r} has no recorded decisions: pass them, or decide it first")
            applied = json.loads(old["decisions"]) if decisions is None else dict(decisions)
            task = self._get_task(cur, old["task_id"])
            claim = {"pause_id": pause_id, "who": who, "now": now, "decisions": _encode(applied)}
            row = self._one(cur, self.s_pause_claim, claim)
            if row is None:
                raise _LostRace  # another claimer won since our read (cannot happen under the write lock)
            transition = TransitionRecord(
                f"tr-{uuid.uuid4().hex[:12]}",
                old["task_id"],
                "resume",
                who,
                why,
                now,
                pause_id,
                _loads(task["outcome"]),
                applied,
            )
            self._x(cur, self.s_transition_insert, _transition_params(transition))
            self._x(cur, self.s_reopen, {"task_id": old["task_id"], "now": now})
            return _pause(row), transition

        return self._write(work, durable=True)

    def recover(
        self,
        task_id: str,
        *,
        who: str,
        why: str,
        kind: str = "recover",
        budget_delta: dict[str, Any] | None = None,
        now: float = 0.0,
    ) -> TransitionRecord:
        def work(cur: Any) -> TransitionRecord:
            task = self._get_task(cur, task_id)
            if task["status"] == "running" and (task["stop_reason"] is None or kind != "recover"):
                raise StateError(f"task {task_id!r} is running: there is nothing to recover")
            delta = dict(budget_delta or {})
            budget = _budget(task).extended(delta)
            transition = TransitionRecord(
                f"tr-{uuid.uuid4().hex[:12]}",
                task_id,
                kind,
                who,
                why,
                now,
                None,
                _loads(task["outcome"]),
                {},
                delta,
            )
            self._x(cur, self.s_transition_insert, _transition_params(transition))
            self._x(
                cur,
                self.s_recover,
                {
                    "task_id": task_id,
                    "model_turns": budget.model_turns,
                    "tool_executions": budget.tool_executions,
                    "deadline": budget.deadline,
                    "cost_limit": budget.cost,
                    "clear_stop": kind == "recover",
                    "now": now,
                },
            )
            return transition

        return self._write(work, durable=True)

    def transitions(self, task_id: str | None = None) -> list[TransitionRecord]:
        if task_id is None:
            rows = self._read(lambda cur: self._all(cur, self.s_transitions))
        else:
            rows = self._read(lambda cur: self._all(cur, self.s_transitions_of, {"task_id": task_id}))
        return [_transition(row) for row in rows]


def _transition_params(t: TransitionRecord) -> dict[str, Any]:
    return {
        "transition_id": t.transition_id,
        "task_id": t.task_id,
        "kind": t.kind,
        "who": t.who,
        "why": t.why,
        "at": t.at,
        "pause_id": t.pause_id,
        "from_outcome": _dumps(t.from_outcome),
        "decisions": _encode(dict(t.decisions)),
        "budget_delta": _encode(dict(t.budget_delta)),
    }


def _sqlite_on_connect(synchronous: str, dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_HANDLER_MS}")
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        # WAL is a property of the file, set once; switching a new file while another connection does the same
        # answers "locked" at once (no busy wait for that lock upgrade), so wait for it here
        while True:
            try:
                if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                    break
                cursor.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.002 * random.random())
        cursor.execute(f"PRAGMA synchronous = {synchronous}")  # FULL: the WAL is fsynced at every commit
    finally:
        cursor.close()


def _pg_on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.autocommit = True
    dbapi_connection.execute("SET default_transaction_isolation TO 'repeatable read'")
