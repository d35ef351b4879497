"""The store on SQL: each method builds its bind values once and runs its backend's step atomically."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite as lite
from sqlalchemy.engine import URL

from ...values.budget import Budget
from ...values.families import check_family, task_family
from ...values.outcome import Usage
from ..base import (
    Activation,
    Grant,
    OperationClaim,
    OperationRecord,
    OperationState,
    PauseRecord,
    Progress,
    Settlement,
    StepRecord,
    StopMark,
    Store,
    TaskSnapshot,
    TraceEntry,
    TransitionRecord,
    WriteReservation,
    ensured,
    operator_text,
)
from ..rules import check_tokens, progressed, unknown_step
from .connection import Database
from .postgres import PostgresSteps
from .queries import SQLQueries
from .sqlite import SQLiteSteps
from .statements import KEY_ROW, fetch_all, fetch_one, last_revisions, statements_for
from .tables import (
    activation,
    budget_params,
    dumps,
    encode,
    operation,
    pause,
    snapshot,
    step_record,
    trace_entry,
    trace_params,
    transition,
)

__all__ = ["SQLStore"]


def _tool_limit(limit: tuple[str, int] | None) -> dict[str, Any]:
    """The bind values of a per-tool limit (``tool_max`` None: the reservation names none)."""
    name, allowed = limit if limit is not None else (None, None)
    return {"limit_tool": name, "tool_max": allowed}


def _reason(record: dict[str, Any]) -> str | None:
    """The reason of a recovery record, as the task row keeps it for its pages and tallies."""
    reason = record.get("reason")
    return None if reason is None else str(reason)


def _flush_quietly(db: Database) -> None:
    """Write what a store left deferred when it is collected or the interpreter exits (best effort: trace rows)."""
    with contextlib.suppress(Exception):
        if not db.readonly:
            db.flush()


class SQLStore(SQLQueries, Store):
    """A :class:`~agents_loopguard.store.base.Store` in a SQLite file or a PostgreSQL database, shared by workers.

    ``url`` is a SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://user@host/db``, which needs the
    ``[postgres]`` extra); without one, ``$LOOPGUARD_DATABASE_URL``, else ``sqlite:///.loopguard/loopguard.db``
    under the working directory (``?synchronous=NORMAL`` trades the durability of the last commits on a power loss
    for speed). Create one store per process (it keeps a connection per thread that uses it) and :meth:`close` it
    when done. Lists are oldest first: tasks and operations by creation time (ties by id), the others in insertion
    order.

    What the store does with the database it is given, before its first step:

    * ``create=True`` (the default, for the workers that write): a missing SQLite file (and its folder) is created,
      and an *empty* database (PostgreSQL: the first schema of the ``search_path``) gets the tables;
    * ``create=False`` (commands that act on an existing store): nothing is created; a missing SQLite file is
      :class:`~agents_loopguard.NotFoundError` ``no loopguard store at PATH``, and so is an empty database;
    * ``readonly=True`` (commands and APIs that only read; implies ``create=False``): nothing is ever written; the
      SQLite file is opened read-only (``?mode=ro``, so a read-only file or folder can be inspected), PostgreSQL
      sessions are read-only, and a step that would write is refused with a ``StoreError``;
    * always: a database that holds other tables but no ``loopguard_meta`` is refused, never stamped; a store of an
      older schema version is refused with a message naming ``loopguard migrate``, a newer one with a message to
      upgrade agents_loopguard.

    Every fault of the database or its disk (a path that cannot hold a file, missing permissions, a full disk, a
    connection lost mid-step, a server that cannot be reached) is a :class:`~agents_loopguard.StoreError`
    of one line that names the store (the password hidden); the step that failed kept nothing.

    >>> import tempfile
    >>> from agents_loopguard import Budget
    >>> folder = tempfile.mkdtemp()
    >>> store = SQLStore(f"sqlite:///{folder}/lg.db")
    >>> _ = store.ensure_task("t1", Budget(model_turns=1, tool_executions=1))
    >>> store.reserve_turn("t1").granted, store.reserve_turn("t1").reason
    (True, <Reason.MODEL_BUDGET: 'model_budget'>)
    >>> store.close()
    >>> with SQLStore(f"sqlite:///{folder}/lg.db", readonly=True) as reader:
    ...     reader.task("t1").used.models
    1
    >>> SQLStore(f"sqlite:///{folder}/typo.db", create=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    agents_loopguard.values.errors.NotFoundError: no loopguard store at .../typo.db
    """

    def __init__(
        self, url: str | URL | None = None, *, create: bool = True, readonly: bool = False, echo: bool = False
    ) -> None:
        self._db = Database(url, echo=echo, create=create, readonly=readonly)
        postgres = self._db.postgres
        self._st = statements_for(self._db.engine.dialect, pg.insert if postgres else lite.insert)
        self._steps: SQLiteSteps = PostgresSteps(self._st) if postgres else SQLiteSteps(self._st)
        weakref.finalize(self, _flush_quietly, self._db)  # deferred trace rows are written at exit or collection
        self._known: set[str] = set()
        """Tasks this store created or found: trace rows of theirs can be deferred (a prune removes only tasks that
        ended long ago, and a task run again is created again before its first trace row)."""
        self._progress: dict[str, tuple[int, int, Usage]] = {}
        """Task -> (revision, stalled, counters) as this store's last reservation on it read them, until a result
        uses them: one read's result per reservation is answered from them and written with the next step (see
        :meth:`record_execution`), so what waits for the next step stays bounded."""
        self._progress_lock = threading.Lock()

    @property
    def readonly(self) -> bool:
        """True when the store never writes (opened with ``readonly=True``)."""
        return self._db.readonly

    @property
    def url(self) -> URL:
        """The database's URL (without its ``synchronous`` setting)."""
        return self._db.url

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.backend

    @property
    def synchronous(self) -> str | None:
        """The durability mode: SQLite's WRITES, FULL, EXTRA or NORMAL; PostgreSQL's WRITES or FULL."""
        return self._db.synchronous

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for inspection and tests; the store's statements are its own)."""
        return self._db.engine

    def _cursor(self) -> Any:
        """This thread's DBAPI cursor, the one the store's steps run on (for tests and benchmarks)."""
        return self._db.cursor()

    def close(self) -> None:
        """Write what is deferred (SQLite trace rows), then close the store's connections. The store reconnects if
        used again."""
        try:
            if not self._db.readonly:
                self._db.flush()
        finally:
            self._db.close()

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return self._db.name

    # --- tasks and counters -------------------------------------------------------------------------------------------

    def ensure_task(
        self, task_id: str, budget: Budget, *, revision: int = 0, now: float = 0.0, family: str | None = None
    ) -> TaskSnapshot:
        named = check_family(family) or task_family(task_id)
        params = {"task_id": task_id, **budget_params(budget), "revision": revision, "now": now, "family": named}
        task, created = self._db.step(lambda cur: self._steps.ensure_task(cur, params), task=task_id)
        self._known.add(task_id)
        return ensured(task, budget, created=created)

    def task(self, task_id: str) -> TaskSnapshot | None:
        self._db.flush()
        row = self._db.read(lambda cur: fetch_one(cur, self._st.task, {"task_id": task_id}))
        return snapshot(row) if row is not None else None

    def committed_task(self, task_id: str) -> TaskSnapshot | None:
        row = self._db.read(lambda cur: fetch_one(cur, self._st.task, {"task_id": task_id}))
        return snapshot(row) if row is not None else None

    def tasks(self) -> list[TaskSnapshot]:
        self._db.flush()
        return [snapshot(row) for row in self._db.read(lambda cur: fetch_all(cur, self._st.tasks))]

    def _saw(self, task_id: str, grant: Grant | None) -> None:
        """Keep what a granted reservation read of the task's progress."""
        if grant is not None and grant.granted and grant.stalled is not None:
            with self._progress_lock:
                self._progress[task_id] = (grant.revision, grant.stalled, grant.used)

    def reserve_turn(self, task_id: str, *, now: float = 0.0) -> Grant:
        params = {"task_id": task_id, "now": now}
        grant = self._db.step(lambda cur: self._steps.reserve_turn(cur, params), task=task_id)
        self._saw(task_id, grant)
        return grant

    def reserve_execution(
        self,
        task_id: str,
        fingerprint: str,
        *,
        max_repeats: int,
        now: float = 0.0,
        max_wait: float | None = None,
        poll: bool = False,
        tool_limit: tuple[str, int] | None = None,
    ) -> Grant:
        params = {
            "task_id": task_id,
            "fingerprint": fingerprint,
            "max_repeats": max_repeats,
            "now": now,
            "max_wait": max_wait if poll else None,
            **_tool_limit(tool_limit),
        }
        grant = self._db.step(lambda cur: self._steps.reserve_execution(cur, params, poll=poll), task=task_id)
        self._saw(task_id, grant)
        return grant

    def reserve_write(
        self,
        task_id: str,
        operation_id: str,
        fingerprint: str,
        tool: str,
        *,
        max_repeats: int,
        now: float = 0.0,
        tool_limit: tuple[str, int] | None = None,
    ) -> WriteReservation:
        params = {
            "task_id": task_id,
            "operation_id": operation_id,
            "fingerprint": fingerprint,
            "payload": fingerprint,
            "tool": tool,
            "max_repeats": max_repeats,
            "now": now,
            **_tool_limit(tool_limit),
        }
        reservation = self._db.step(lambda cur: self._steps.reserve_write(cur, params), durable=True, task=task_id)
        self._saw(task_id, reservation.grant)
        return reservation

    def _counted(self, task_id: str, used: Usage) -> Usage:
        """Keep the counters a cost or token step returned (the progress it left as it was)."""
        with self._progress_lock:
            known = self._progress.get(task_id)
            if known is not None:
                self._progress[task_id] = (known[0], known[1], used)
        return used

    def reserve_cost(self, task_id: str, amount: float) -> Grant:
        params = {"task_id": task_id, "amount": amount}
        grant = self._db.write(lambda cur: self._steps.reserve_cost(cur, params), task=task_id)
        self._counted(task_id, grant.used)
        return grant

    def settle_cost(self, task_id: str, reserved: float, actual: float) -> Usage:
        params = {"task_id": task_id, "reserved": reserved, "actual": actual}
        return self._counted(task_id, self._db.step(lambda cur: self._steps.settle_cost(cur, params), task=task_id))

    def reserve_tokens(self, task_id: str, input_tokens: int, output_tokens: int) -> Grant:
        check_tokens(input_tokens, output_tokens)
        params = {"task_id": task_id, "in": input_tokens, "out": output_tokens}
        grant = self._db.step(lambda cur: self._steps.reserve_tokens(cur, params), task=task_id)
        self._counted(task_id, grant.used)
        return grant

    def settle_tokens(self, task_id: str, *, reserved: tuple[int, int], actual: tuple[int, int]) -> Usage:
        (reserved_in, reserved_out), (actual_in, actual_out) = check_tokens(*reserved), check_tokens(*actual)
        params = {
            "task_id": task_id,
            "reserved_in": reserved_in,
            "reserved_out": reserved_out,
            "actual_in": actual_in,
            "actual_out": actual_out,
        }
        return self._counted(task_id, self._db.step(lambda cur: self._steps.settle_tokens(cur, params), task=task_id))

    # --- the operation ledger -----------------------------------------------------------------------------------------

    def lookup_operation(self, operation_id: str) -> OperationRecord | None:
        row = self._db.read(lambda cur: fetch_one(cur, self._st.op, {"operation_id": operation_id}))
        return operation(row) if row is not None else None

    def reserve_operation(
        self, task_id: str, operation_id: str, payload: str, tool: str, *, now: float = 0.0
    ) -> OperationClaim:
        params = {"task_id": task_id, "operation_id": operation_id, "payload": payload, "tool": tool, "now": now}
        return self._db.write(lambda cur: self._steps.reserve_operation(cur, params), durable=True)

    def operations(self, task_id: str | None = None) -> list[OperationRecord]:
        if task_id is None:
            rows = self._db.read(lambda cur: fetch_all(cur, self._st.ops))
        else:
            rows = self._db.read(lambda cur: fetch_all(cur, self._st.ops_of, {"task_id": task_id}))
        return [operation(row) for row in rows]

    def reconcile_operation(
        self, operation_id: str, state: OperationState, result: Any = None, *, now: float = 0.0
    ) -> OperationRecord:
        params = {
            "operation_id": operation_id,
            "state": str(OperationState(state)),
            "result": dumps(result),
            "now": now,
        }
        return self._db.write(lambda cur: self._steps.reconcile_operation(cur, params), durable=True)

    def settle_operation(
        self,
        operation_id: str,
        state: OperationState,
        result: Any = None,
        *,
        expected: OperationState,
        who: str,
        why: str,
        kind: str,
        now: float = 0.0,
    ) -> Settlement:
        params = {
            "operation_id": operation_id,
            "state": str(OperationState(state)),
            "expected": str(OperationState(expected)),
            "result": dumps(result),
            "now": now,
        }
        return self._db.write(
            lambda cur: self._steps.settle_operation(cur, params, who=who, why=why, kind=kind), durable=True
        )

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
        key: tuple[str, int] | None = None,
    ) -> Progress:
        """A read's result (no operation, no seen keys) decides nothing by itself: the first one after a reservation
        is answered from the progress that reservation read and written with the next step, like a trace row
        (another worker sees it one step later). A write's answer, a page's keys and any other result are a step of
        their own."""
        mode = "none" if revision is None else ("pending" if pending else "step")
        params = trace_params(task_id, entry)
        params["revision"] = revision
        params["keys"] = list(dict.fromkeys(seen)) + ([f"{KEY_ROW}{key[0]}:{key[1]}"] if key is not None else [])
        if operation is None and not seen and task_id in self._known:
            predicted = self._predict(task_id, revision, pending=pending)
            if predicted is not None:
                self._db.defer(lambda cur: self._steps.deferred_record(cur, params, mode=mode))
                return predicted
        if operation is not None:
            op_id, op_state, op_result = operation
            params.update(op_id=op_id, op_state=str(OperationState(op_state)), op_result=dumps(op_result))
        # a write's answer is ledger: as durable as its reservation (fsynced under SQLite's WRITES)
        progress = self._db.step(
            lambda cur: self._steps.record_execution(cur, params, mode=mode, seen=seen),
            durable=operation is not None,
            task=task_id,
        )
        with self._progress_lock:
            self._progress.pop(task_id, None)
        return progress

    def _predict(self, task_id: str, revision: int | None, *, pending: bool) -> Progress | None:
        """The progress a read's result makes from what this store's last reservation read (None when no
        reservation since the last result: the result is then a step of its own)."""
        with self._progress_lock:
            known = self._progress.pop(task_id, None)
        if known is None:
            return None
        now_revision, stalled = progressed(known[0], known[1], revision, pending=pending)
        return Progress(now_revision, stalled, (), known[2])

    def append_trace(self, task_id: str, entry: TraceEntry) -> None:
        """The entry is written with the next write step of this store (its own transaction would cost a commit per
        model turn): on SQLite in that step's transaction, on PostgreSQL in one pipeline with that step's statement.
        The first entry of a task this store has not seen yet is a step of its own (an unknown task is refused)."""
        params = trace_params(task_id, entry)
        if task_id not in self._known:  # its own step: an unknown task is refused now
            self._db.step(lambda cur: self._steps.append_trace(cur, params), task=task_id)
            self._known.add(task_id)
            return
        self._db.defer(lambda cur: self._steps.deferred_trace(cur, params))

    def trace(self, task_id: str) -> list[TraceEntry]:
        def work(cur: Any) -> list[Any]:
            rows = fetch_all(cur, self._st.trace, {"task_id": task_id})
            if not rows:
                self._steps.get_task(cur, task_id)
            return rows

        self._db.flush()
        return [trace_entry(row) for row in self._db.read(work)]

    def progress_keys(self, task_id: str) -> dict[str, int]:
        """Kept as seen keys ``revision:<key>:<n>``, one for each revision a key reached (no schema of their own)."""
        params = {"task_id": task_id, "prefix": KEY_ROW, "length": len(KEY_ROW)}
        self._db.flush()
        rows = self._db.read(lambda cur: fetch_all(cur, self._st.seen_keys, params))
        return last_revisions(str(row["key"]) for row in rows)

    # --- durable engines' steps (R17) -----------------------------------------------------------------------------

    def begin_step(self, task_id: str, key: str, *, now: float = 0.0) -> StepRecord:
        params = {"task_id": task_id, "step_key": key, "now": now}

        def work(cur: Any) -> Any:
            self._steps.get_task(cur, task_id)
            return fetch_one(cur, self._st.step_begin, params) or fetch_one(cur, self._st.step, params)

        return step_record(self._db.write(work, durable=True, task=task_id))

    def end_step(self, task_id: str, key: str, output: Any, *, now: float = 0.0) -> StepRecord:
        params = {"task_id": task_id, "step_key": key, "output": dumps(output), "now": now}

        def work(cur: Any) -> Any:
            row = fetch_one(cur, self._st.step_end, params) or fetch_one(cur, self._st.step, params)
            if row is None:
                raise unknown_step(task_id, key)
            return row

        return step_record(self._db.write(work, durable=True, task=task_id))

    # --- stop mark and terminal outcome -------------------------------------------------------------------------------

    def set_stop_mark(
        self, task_id: str, reason: str = "stop_requested", *, who: str | None = None, now: float = 0.0
    ) -> StopMark:
        params = {"task_id": task_id, "reason": operator_text(reason) or "stop_requested", "now": now}
        who = operator_text(who) if who is not None else None
        return self._db.write(lambda cur: self._steps.set_stop_mark(cur, params, who), durable=True)

    def finish(self, task_id: str, record: dict[str, Any], *, now: float = 0.0) -> dict[str, Any]:
        status = str(record.get("status", "stopped"))
        params = {"task_id": task_id, "outcome": dumps(record), "status": status, "reason": _reason(record), "now": now}
        return self._db.step(lambda cur: self._steps.finish(cur, params), durable=True, task=task_id)

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
        params = {"activation_id": activation_id, "flow": flow, "origin": origin_operation_id, "now": now}
        return self._db.write(lambda cur: self._steps.activate(cur, params, max_depth=max_depth), durable=True)

    def activations(self, flow: str | None = None) -> list[Activation]:
        if flow is None:
            rows = self._db.read(lambda cur: fetch_all(cur, self._st.activations))
        else:
            rows = self._db.read(lambda cur: fetch_all(cur, self._st.activations_of, {"flow": flow}))
        return [activation(row) for row in rows]

    def activation(self, activation_id: str) -> Activation | None:
        params = {"activation_id": activation_id}
        row = self._db.read(lambda cur: fetch_one(cur, self._st.activation, params))
        return activation(row) if row is not None else None

    # --- approval pauses and transitions ------------------------------------------------------------------------------

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
            "pending_calls": encode(list(pending_calls)),
            "now": now,
            "outcome": dumps(outcome),
            "status": str(outcome.get("status", "needs_human")),
            "reason": _reason(outcome),
        }
        return self._db.write(lambda cur: self._steps.save_pause(cur, params), durable=True)

    def pause(self, pause_id: str) -> PauseRecord | None:
        row = self._db.read(lambda cur: fetch_one(cur, self._st.pause, {"pause_id": pause_id}))
        return pause(row) if row is not None else None

    def pauses(self, task_id: str | None = None) -> list[PauseRecord]:
        if task_id is None:
            rows = self._db.read(lambda cur: fetch_all(cur, self._st.pauses))
        else:
            rows = self._db.read(lambda cur: fetch_all(cur, self._st.pauses_of, {"task_id": task_id}))
        return [pause(row) for row in rows]

    def decide_pause(
        self,
        pause_id: str,
        *,
        who: str,
        decisions: dict[str, str],
        why: str = "",
        digest: str | None = None,
        now: float = 0.0,
    ) -> PauseRecord:
        params = {
            "pause_id": pause_id,
            "who": who,
            "why": why,
            "now": now,
            "decisions": encode(dict(decisions)),
            "decisions_digest": digest,
        }
        return self._db.write(lambda cur: self._steps.decide_pause(cur, params), durable=True)

    def claim_pause(
        self, pause_id: str, *, who: str, decisions: dict[str, str] | None = None, why: str = "", now: float = 0.0
    ) -> tuple[PauseRecord, TransitionRecord]:
        return self._db.write(
            lambda cur: self._steps.claim_pause(cur, pause_id, who=who, decisions=decisions, why=why, now=now),
            durable=True,
        )

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
        delta = dict(budget_delta or {})
        return self._db.write(
            lambda cur: self._steps.recover(cur, task_id, who=who, why=why, kind=kind, delta=delta, now=now),
            durable=True,
        )

    def label_task(self, task_id: str, label: str, *, who: str, why: str = "", now: float = 0.0) -> TransitionRecord:
        transition = TransitionRecord.new(task_id, "label", who, why, now, decisions={"label": label})
        return self._db.write(lambda cur: self._steps.label_task(cur, transition), durable=True)

    def transitions(self, task_id: str | None = None) -> list[TransitionRecord]:
        if task_id is None:
            rows = self._db.read(lambda cur: fetch_all(cur, self._st.transitions))
        else:
            rows = self._db.read(lambda cur: fetch_all(cur, self._st.transitions_of, {"task_id": task_id}))
        return [transition(row) for row in rows]
