"""The operators' pages, the metrics' tallies and the prune on SQL: each a statement that reads an index (R22).

A page is ``WHERE <filters> AND (sort key) < (:after) ORDER BY <sort key> LIMIT :limit`` on an index whose leading
columns are the filter and the sort key (see :mod:`.tables`), so it reads about ``limit`` index entries whatever the
size of the store. Statements are compiled once per shape (which filters are given) and kept.

A prune batch is one short transaction (SQLite: under the write lock for a few milliseconds; PostgreSQL: a
transaction of its own, whose deletes re-check what made a task prunable, so a task reopened meanwhile stays).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from ..base import OperationRecord, OperationState, PauseRecord, TaskSnapshot, TraceEntry, TransitionRecord
from ..queries import (
    OperationQuery,
    PauseQuery,
    PruneCounts,
    Queries,
    Tallies,
    Tally,
    TaskQuery,
    TransitionQuery,
)
from ..rules import unknown_task
from .connection import Database
from .statements import Compiled, bind, compiler, fetch_all, fetch_one
from .tables import (
    acts,
    operation,
    ops,
    pause,
    pauses,
    refusals,
    reps,
    seen,
    snapshot,
    steps,
    tallies,
    tasks,
    tool_runs,
    trace,
    trace_entry,
    trans,
    transition,
)

__all__ = ["SQLQueries"]

p = bind
ENDED = ("completed", "partial", "stopped", "needs_human", "needs_reconciliation")
"""The terminal statuses (a task whose status is one of these may be pruned)."""
OPEN_PAUSES = ("pending", "decided")
UNKNOWN = str(OperationState.UNKNOWN)
SETTLED = (str(OperationState.COMMITTED), str(OperationState.NOT_COMMITTED))


def _prefix(column: Any, name: str) -> Any:
    """``column`` starts with the bind value ``name`` (exact and case-sensitive on both backends, unlike LIKE)."""
    return sa.func.substr(column, 1, sa.func.length(p(name, type_=sa.String))) == p(name, type_=sa.String)


def _window(column: Any, after: float | None, before: float | None) -> list[Any]:
    found = []
    if after is not None:
        found.append(column > p("updated_after", type_=sa.Float))
    if before is not None:
        found.append(column < p("updated_before", type_=sa.Float))
    return found


def _keyset(order: tuple[Any, Any], newest: bool) -> Any:
    after = sa.tuple_(p("after_at", type_=sa.Float), p("after_id", type_=sa.String))
    key = sa.tuple_(*order)
    return key < after if newest else key > after


def _ordered(stmt: Any, order: tuple[Any, Any], newest: bool) -> Any:
    keys = [c.desc() for c in order] if newest else list(order)
    return stmt.order_by(*keys).limit(p("limit", type_=sa.Integer))


class SQLQueries(Queries):
    """:class:`~agents_loopguard.store.queries.Queries` on SQL (a mixin of SQLStore, which gives it ``_db``)."""

    _db: Database

    def _compiled(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Compiled:
        cache: dict[tuple[Any, ...], Compiled] = self.__dict__.setdefault("_query_cache", {})
        found = cache.get(key)
        if found is None:
            with self.__dict__.setdefault("_query_lock", threading.Lock()):
                found = cache[key] = compiler(self._db.engine.dialect)(build())
        return found

    def _page(self, key: tuple[Any, ...], build: Callable[[], Any], params: dict[str, Any]) -> list[Any]:
        self._db.flush()
        stmt = self._compiled(key, build)
        return self._db.read(lambda cur: fetch_all(cur, stmt, params))

    # --- pages ----------------------------------------------------------------------------------------------------

    def task_page(self, query: TaskQuery) -> list[TaskSnapshot]:
        t = tasks
        order = (t.c.created_at, t.c.task_id)
        given = tuple(
            name for name in ("status", "reason", "family", "prefix", "after") if getattr(query, name) is not None
        )
        window = (query.updated_after is not None, query.updated_before is not None)

        def build() -> Any:
            where = [t.c[name] == p(name, type_=sa.String) for name in given if name in ("status", "reason", "family")]
            if query.prefix is not None:
                where.append(_prefix(t.c.task_id, "prefix"))
            where += _window(t.c.updated_at, query.updated_after, query.updated_before)
            if query.after is not None:
                where.append(_keyset(order, newest=True))
            return _ordered(sa.select(t).where(*where), order, newest=True)

        rows = self._page(("tasks", given, window), build, self._params(query))
        return [snapshot(row) for row in rows]

    @staticmethod
    def _params(query: Any) -> dict[str, Any]:
        params = {k: v for k, v in vars(query).items() if v is not None and k != "after"}
        if query.after is not None:
            params["after_at"], params["after_id"] = float(query.after[0]), str(query.after[1])
        return params

    def trace_page(self, task_id: str, *, before: int | None = None, limit: int = 50) -> list[TraceEntry]:
        tr = trace

        def build() -> Any:
            where = [tr.c.task_id == p("task_id")]
            if before is not None:
                where.append(tr.c.seq < p("before", type_=sa.BigInteger))
            return sa.select(tr).where(*where).order_by(tr.c.seq.desc()).limit(p("limit", type_=sa.Integer))

        self._db.flush()
        stmt = self._compiled(("trace", before is not None), build)
        exists = self._compiled(("task_exists",), lambda: sa.select(tasks.c.task_id).where(tasks.c.task_id == p("id")))

        def work(cur: Any) -> list[Any]:
            rows = fetch_all(cur, stmt, {"task_id": task_id, "before": before, "limit": limit})
            if not rows and fetch_one(cur, exists, {"id": task_id}) is None:
                raise unknown_task(task_id)
            return rows

        return [trace_entry(row) for row in self._db.read(work)]

    def operation_page(self, query: OperationQuery) -> list[OperationRecord]:
        o = ops
        order = (o.c.created_at, o.c.operation_id)
        given = tuple(name for name in ("state", "task_id", "prefix", "after") if getattr(query, name) is not None)
        window = (query.updated_after is not None, query.updated_before is not None)

        def build() -> Any:
            where = [o.c[name] == p(name, type_=sa.String) for name in given if name in ("state", "task_id")]
            if query.prefix is not None:
                where.append(_prefix(o.c.operation_id, "prefix"))
            where += _window(o.c.updated_at, query.updated_after, query.updated_before)
            if query.after is not None:
                where.append(_keyset(order, newest=True))
            return _ordered(sa.select(o).where(*where), order, newest=True)

        return [operation(row) for row in self._page(("ops", given, window), build, self._params(query))]

    def pause_page(self, query: PauseQuery) -> list[PauseRecord]:
        ps = pauses
        order = (ps.c.created_at, ps.c.pause_id)
        given = tuple(name for name in ("status", "task_id", "after") if getattr(query, name) is not None)

        def build() -> Any:
            where = [ps.c[name] == p(name, type_=sa.String) for name in given if name != "after"]
            if query.after is not None:
                where.append(_keyset(order, newest=False))
            return _ordered(sa.select(ps).where(*where), order, newest=False)

        return [pause(row) for row in self._page(("pauses", given), build, self._params(query))]

    def transition_page(self, query: TransitionQuery) -> list[TransitionRecord]:
        tn = trans
        order = (tn.c.at, tn.c.transition_id)
        given = tuple(name for name in ("task_id", "kind", "after") if getattr(query, name) is not None)

        def build() -> Any:
            where = [tn.c[name] == p(name, type_=sa.String) for name in given if name != "after"]
            if query.after is not None:
                where.append(_keyset(order, newest=True))
            return _ordered(sa.select(tn).where(*where), order, newest=True)

        return [transition(row) for row in self._page(("transitions", given), build, self._params(query))]

    # --- metrics --------------------------------------------------------------------------------------------------

    def tallies(self) -> Tallies:
        t, ty, rf = tasks, tallies, refusals
        sums = ("tasks", "models", "model_turns", "tools", "tool_executions")
        ended = self._compiled(
            ("tallies",),
            lambda: (
                sa.select(ty.c.family, ty.c.status, ty.c.reason, *(sa.func.sum(ty.c[s]).label(s) for s in sums))
                .group_by(ty.c.family, ty.c.status, ty.c.reason)
                .order_by(ty.c.family, ty.c.status, ty.c.reason)
            ),
        )
        running = self._compiled(  # summed here: a GROUP BY could lead a planner to the family index, a full scan
            ("running",),
            lambda: sa.select(t.c.family, *(t.c[s] for s in sums[1:])).where(t.c.status == "running"),
        )
        refused = self._compiled(
            ("refusals",),
            lambda: (
                sa.select(rf.c.family, rf.c.reason, sa.func.sum(rf.c.count).label("count"))
                .group_by(rf.c.family, rf.c.reason)
                .order_by(rf.c.family, rf.c.reason)
            ),
        )
        waiting = self._compiled(
            ("pending",),
            lambda: sa.select(sa.func.count().label("n"), sa.func.min(pauses.c.created_at).label("oldest")).where(
                pauses.c.status == "pending"
            ),
        )
        unknown = self._compiled(
            ("unknown",),
            lambda: sa.select(sa.func.count().label("n"), sa.func.min(ops.c.created_at).label("oldest")).where(
                ops.c.state == UNKNOWN
            ),
        )
        self._db.flush()

        def work(cur: Any) -> Tallies:
            groups = [
                Tally(r["family"], r["status"], r["reason"], *(int(r[s]) for s in sums))
                for r in fetch_all(cur, ended)
                if int(r["tasks"])
            ]
            live = _running(fetch_all(cur, running), sums[1:])
            pending, open_ops = fetch_one(cur, waiting), fetch_one(cur, unknown)
            return Tallies(
                tasks=tuple(sorted([*groups, *live], key=lambda g: (g.family, g.status, g.reason))),
                refusals=tuple((r["family"], r["reason"], int(r["count"])) for r in fetch_all(cur, refused)),
                pending_pauses=int(pending["n"]),
                oldest_pending_pause=pending["oldest"],
                unknown_operations=int(open_ops["n"]),
                oldest_unknown_operation=open_ops["oldest"],
            )

        return self._db.read(work)

    # --- retention ------------------------------------------------------------------------------------------------

    def prune(
        self, *, finished_before: float, settled_before: float, limit: int = 500, dry_run: bool = False
    ) -> PruneCounts:
        st = _prune_statements(self, self._db.postgres)
        params = {"fb": finished_before, "sb": settled_before, "n": limit}
        if dry_run:
            self._db.flush()
            return self._db.read(lambda cur: _count(cur, st, params))
        return self._db.write(lambda cur: _batch(cur, st, params, postgres=self._db.postgres))


def _running(rows: list[Any], sums: tuple[str, ...]) -> list[Tally]:
    """The running tasks' rows (read through the status index) summed by family."""
    groups: dict[str, list[int]] = {}
    for row in rows:
        group = groups.setdefault(row["family"], [0] * (len(sums) + 1))
        group[0] += 1
        for i, name in enumerate(sums, start=1):
            group[i] += int(row[name])
    return [Tally(family, "running", "", *values) for family, values in groups.items()]


# --- the prune's statements ------------------------------------------------------------------------------------------

_T, _O, _P, _A = tasks.name, ops.name, pauses.name, acts.name
_ENDED_SQL = ", ".join(f"'{s}'" for s in ENDED)
_PRUNABLE = (
    f"t.status IN ({_ENDED_SQL}) AND t.created_at < :fb AND t.updated_at < :fb "
    f"AND NOT EXISTS (SELECT 1 FROM {_P} p WHERE p.task_id = t.task_id AND p.status IN ('pending', 'decided')) "
    f"AND NOT EXISTS (SELECT 1 FROM {_O} o WHERE o.task_id = t.task_id AND {{plus}}o.state = '{UNKNOWN}')"
)
"""A task a prune may remove: ended before the cutoff, not paused, no write of unknown effect. On SQLite a unary
``+`` keeps the operations' lookup on the task index: on the state index it read every unknown operation's row for
each task it checked (2.2 s for a batch of 500 at 10^6 tasks with 1,000 unknown writes; 2 ms on the task index)."""
_SETTLED = (
    f"o.state IN ('{SETTLED[0]}', '{SETTLED[1]}') AND o.created_at < :sb AND o.updated_at < :sb "
    f"AND NOT EXISTS (SELECT 1 FROM {_T} t WHERE t.task_id = o.task_id"
)
_OLD_ACTIVATION = f"a.created_at < :sb AND NOT EXISTS (SELECT 1 FROM {_T} t WHERE t.task_id = a.activation_id"
DEPENDENTS = {
    "trace": trace.name,
    "repetitions": reps.name,
    "seen": seen.name,
    "tool_runs": tool_runs.name,
    "steps": steps.name,
    "pauses": pauses.name,
    "transitions": trans.name,
}
"""The rows of a task, by the name :class:`PruneCounts` counts them under."""


def _prune_statements(owner: SQLQueries, postgres: bool) -> dict[str, Compiled]:
    """The prune's statements for the store's dialect (compiled once per store)."""
    ids = _IDS_MARK  # the batch's ids, written in when it runs (see _ids)
    plus = "" if postgres else "+"
    prunable = _PRUNABLE.format(plus=plus)
    texts = {
        "pick": f"SELECT t.task_id FROM {_T} t WHERE {prunable} LIMIT :n",
        "delete_tasks": (  # SQLite: a unary + keeps the planner on the key (not the status index, every task)
            f"DELETE FROM {_T} WHERE task_id {ids} AND {plus}status IN ({_ENDED_SQL}) AND {plus}updated_at < :fb "
            "RETURNING task_id"
        ),
        **{f"delete_{kind}": f"DELETE FROM {table} WHERE task_id {ids}" for kind, table in DEPENDENTS.items()},
        "delete_operations": (
            f"DELETE FROM {_O} WHERE operation_id IN (SELECT o.operation_id FROM {_O} o WHERE {_SETTLED}) LIMIT :n)"
        ),
        "delete_activations": (
            f"DELETE FROM {_A} WHERE ordinal IN (SELECT a.ordinal FROM {_A} a WHERE {_OLD_ACTIVATION}) LIMIT :n)"
        ),
        "count_tasks": f"SELECT count(*) AS n FROM {_T} t WHERE {prunable}",
        **{
            f"count_{kind}": f"SELECT count(*) AS n FROM {table} WHERE task_id IN "
            f"(SELECT t.task_id FROM {_T} t WHERE {prunable})"
            for kind, table in DEPENDENTS.items()
        },
        "count_operations": f"SELECT count(*) AS n FROM {_O} o WHERE {_SETTLED} AND NOT ({prunable}))",
        "count_activations": f"SELECT count(*) AS n FROM {_A} a WHERE {_OLD_ACTIVATION} AND NOT ({prunable}))",
    }
    return {name: owner._compiled(("prune", name), _text(text)) for name, text in texts.items()}


def _text(sql: str) -> Callable[[], Any]:
    return lambda: sa.text(sql)


_IDS_MARK = "IN (__loopguard_ids__)"


def _ids(ids: list[str], postgres: bool) -> tuple[str, dict[str, Any]]:
    """The condition "task_id is one of ``ids``" and its bind values: PostgreSQL an array, SQLite a list of bound
    values (both read the primary key or the task index, one lookup an id)."""
    if postgres:
        return "= ANY(%(ids)s)", {"ids": ids}
    return "IN (" + ", ".join(f":i{n}" for n in range(len(ids))) + ")", {f"i{n}": v for n, v in enumerate(ids)}


def _count(cur: Any, st: dict[str, Compiled], params: dict[str, Any]) -> PruneCounts:
    """What a prune would remove now (a dry run): every eligible row, nothing removed."""
    kinds = ("tasks", *DEPENDENTS, "operations", "activations")
    return PruneCounts(**{kind: int(fetch_one(cur, st[f"count_{kind}"], params)["n"]) for kind in kinds})


def _batch(cur: Any, st: dict[str, Compiled], params: dict[str, Any], *, postgres: bool) -> PruneCounts:
    """One batch: pick prunable tasks, delete them (re-checked), then their rows, old settled operations and
    activations whose task is gone."""
    picked = [row["task_id"] for row in fetch_all(cur, st["pick"], params)]
    removed: list[str] = []
    counts: dict[str, int] = {}
    if picked:
        ids, values = _ids(picked, postgres)
        delete = st["delete_tasks"].sql.replace(_IDS_MARK, ids)
        cur.execute(delete, {**params, **values})
        removed = [row["task_id"] for row in cur.fetchall()]
    if removed:
        ids, values = _ids(removed, postgres)
        for kind in DEPENDENTS:
            cur.execute(st[f"delete_{kind}"].sql.replace(_IDS_MARK, ids), values)
            counts[kind] = max(0, cur.rowcount)
    for kind in ("operations", "activations"):
        cur.execute(st[f"delete_{kind}"].sql, params)
        counts[kind] = max(0, cur.rowcount)
    return PruneCounts(tasks=len(removed), **counts)
