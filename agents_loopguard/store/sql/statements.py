"""The store's statements in SQLAlchemy Core, compiled once for the store's dialect, and how a step runs them.

Every reservation here is conditional: an ``UPDATE ... WHERE`` (not stopped, running, under the limit) with
``RETURNING``, an ``INSERT ... ON CONFLICT DO UPDATE ... WHERE count < :max RETURNING``, or an insert that relies on
a primary key. An empty answer means refused (or lost to a concurrent step); the refusal rules then explain it.
SQLite runs every step with these statements; PostgreSQL runs its cold steps with them and its hot steps as one
statement each (:mod:`.postgres`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import BigInteger, Table, Text
from sqlalchemy.engine import Dialect

from ..base import OperationState
from ..records import REOPENED
from .tables import TOKEN_LIMIT_COLUMNS, acts, ops, pauses, reps, seen, steps, tasks, tool_runs, trace, trans

__all__ = ["Compiled", "Statements", "execute", "fetch_all", "fetch_one", "statements_for"]


def bind(name: str, **kwargs: Any) -> sa.BindParameter[Any]:
    """A bind parameter of the store's statements (prefixed: SQLAlchemy reserves column names in INSERT/UPDATE)."""
    return sa.bindparam(f"b_{name}", **kwargs)


class Compiled:
    """A statement compiled once for the store's dialect: its SQL text and the values of its constant parameters."""

    __slots__ = ("defaults", "sql")

    def __init__(self, sql: str, defaults: dict[str, Any]) -> None:
        self.sql = sql
        self.defaults = defaults

    def params(self, given: dict[str, Any]) -> dict[str, Any]:
        return {**self.defaults, **given} if self.defaults else given


def compiler(dialect: Dialect) -> Callable[[sa.ClauseElement], Compiled]:
    """Compiles a statement for ``dialect``; its bind parameters are named as the steps' params name them."""

    def compile_statement(stmt: sa.ClauseElement) -> Compiled:
        compiled = stmt.compile(dialect=dialect)
        sql = re.sub(r"(:|%\()b_(\w)", r"\1\2", compiled.string)
        defaults = {k: v for k, v in compiled.params.items() if not k.startswith("b_") and k in sql}
        return Compiled(sql, defaults)

    return compile_statement


def execute(cur: Any, stmt: Compiled, params: dict[str, Any]) -> None:
    cur.execute(stmt.sql, stmt.params(params))


def fetch_one(cur: Any, stmt: Compiled, params: dict[str, Any] | None = None) -> Any:
    cur.execute(stmt.sql, stmt.params(params or {}))
    rows = cur.fetchall()
    return rows[0] if rows else None


def fetch_all(cur: Any, stmt: Compiled, params: dict[str, Any] | None = None) -> list[Any]:
    cur.execute(stmt.sql, stmt.params(params or {}))
    return list(cur.fetchall())


KEY_ROW = "revision:"
"""The prefix of the seen keys that keep the revisions a progress key reached: ``revision:<key>:<n>``."""


def last_revisions(rows: Iterable[str]) -> dict[str, int]:
    """Each progress key's last revision, from its seen keys (the highest ``n`` of its ``revision:<key>:<n>``).

    >>> last_revisions(["revision:search:1", "revision:search:3", "revision:a:b:2", "cursor:x"])
    {'search': 3, 'a:b': 2}
    """
    last: dict[str, int] = {}
    for row in rows:
        if row.startswith(KEY_ROW):
            key, _, number = row[len(KEY_ROW) :].rpartition(":")
            if key and number.isdigit():
                last[key] = max(last.get(key, 0), int(number))
    return last


p = bind
t, o, r = tasks, ops, reps
_running = sa.and_(t.c.task_id == p("task_id"), t.c.stop_reason.is_(None), t.c.status == "running")
_counters = (t.c.revision, t.c.models, t.c.tools, t.c.cost, t.c.input_tokens, t.c.output_tokens)


class Statements:
    """The store's statements, compiled for one dialect (``insert``: that dialect's ``INSERT ... ON CONFLICT``)."""

    def __init__(self, dialect: Dialect, insert: Callable[[Table], Any]) -> None:
        self.compile = compiler(dialect)
        self.insert = insert
        self._tasks()
        self._reservations()
        self._trace()
        self._outcomes()
        self._ledger()
        self._activations()
        self._pauses()
        self._transitions()
        self._steps()

    def _tasks(self) -> None:
        c, ins = self.compile, self.insert
        self.task = c(sa.select(t).where(t.c.task_id == p("task_id")))
        self.tasks = c(sa.select(t).order_by(t.c.created_at, t.c.task_id))
        self.task_insert = c(
            ins(t)
            .values(
                task_id=p("task_id"),
                model_turns=p("model_turns"),
                tool_executions=p("tool_executions"),
                deadline=p("deadline"),
                cost_limit=p("cost_limit"),
                **{name: p(name) for name in TOKEN_LIMIT_COLUMNS},
                revision=p("revision"),
                models=0,
                tools=0,
                cost=0.0,
                input_tokens=0,
                output_tokens=0,
                stalled=0,
                status="running",
                trace_seq=0,
                created_at=p("now"),
                updated_at=p("now"),
                family=p("family"),
            )
            .on_conflict_do_nothing(index_elements=["task_id"])
        )

    def _reservations(self) -> None:
        c, ins = self.compile, self.insert
        self.turn = c(
            sa.update(t)
            .where(_running, t.c.models < t.c.model_turns)
            .values(models=t.c.models + 1, trace_seq=t.c.trace_seq + 1, updated_at=p("now"))
            .returning(*_counters, t.c.stalled, t.c.trace_seq)
        )
        self.execution = c(
            sa.update(t)
            .where(_running, t.c.tools < t.c.tool_executions)
            .values(tools=t.c.tools + 1, updated_at=p("now"))
            .returning(*_counters, t.c.stalled)
        )
        repeat = ins(r).values(
            task_id=p("task_id"), fingerprint=p("fingerprint"), revision=p("revision"), count=1, first_at=p("now")
        )
        keys = ["task_id", "fingerprint", "revision"]
        self.repeat = c(
            repeat.on_conflict_do_update(
                index_elements=keys, set_={"count": r.c.count + 1}, where=r.c.count < p("max_repeats")
            ).returning(r.c.count)
        )
        self.repeat_wait = c(
            repeat.on_conflict_do_update(
                index_elements=keys,
                set_={"count": r.c.count + 1},
                where=sa.and_(r.c.count < p("max_repeats"), p("now", type_=sa.Float) - r.c.first_at < p("max_wait")),
            ).returning(r.c.count)
        )
        self.repeat_get = c(
            sa.select(r.c.count, r.c.first_at).where(
                r.c.task_id == p("task_id"), r.c.fingerprint == p("fingerprint"), r.c.revision == p("revision")
            )
        )
        self.cost = c(
            sa.update(t)
            .where(_running, sa.or_(t.c.cost_limit.is_(None), t.c.cost + p("amount") <= t.c.cost_limit))
            .values(cost=t.c.cost + p("amount"))
            .returning(*_counters)
        )
        settled = t.c.cost - p("reserved", type_=sa.Float) + p("actual", type_=sa.Float)
        self.settle = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(cost=sa.case((settled > 0, settled), else_=0.0))
            .returning(*_counters)
        )
        self._tokens()
        self._tool_runs()

    def _tokens(self) -> None:
        c = self.compile
        add_in, add_out = p("in", type_=BigInteger), p("out", type_=BigInteger)
        fits = sa.and_(
            sa.or_(t.c.input_token_limit.is_(None), t.c.input_tokens + add_in <= t.c.input_token_limit),
            sa.or_(t.c.output_token_limit.is_(None), t.c.output_tokens + add_out <= t.c.output_token_limit),
            sa.or_(
                t.c.total_token_limit.is_(None),
                t.c.input_tokens + t.c.output_tokens + add_in + add_out <= t.c.total_token_limit,
            ),
        )
        self.tokens = c(
            sa.update(t)
            .where(_running, fits)
            .values(input_tokens=t.c.input_tokens + add_in, output_tokens=t.c.output_tokens + add_out)
            .returning(*_counters)
        )
        settled_in = t.c.input_tokens - p("reserved_in", type_=BigInteger) + p("actual_in", type_=BigInteger)
        settled_out = t.c.output_tokens - p("reserved_out", type_=BigInteger) + p("actual_out", type_=BigInteger)
        self.settle_tokens = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(
                input_tokens=sa.case((settled_in > 0, settled_in), else_=0),
                output_tokens=sa.case((settled_out > 0, settled_out), else_=0),
            )
            .returning(*_counters)
        )

    def _tool_runs(self) -> None:
        c, ins, tr = self.compile, self.insert, tool_runs
        self.tool_run = c(
            ins(tr)
            .values(task_id=p("task_id"), tool=p("limit_tool"), count=1)
            .on_conflict_do_update(
                index_elements=["task_id", "tool"], set_={"count": tr.c.count + 1}, where=tr.c.count < p("tool_max")
            )
            .returning(tr.c.count)
        )
        self.tool_runs_get = c(sa.select(tr.c.count).where(tr.c.task_id == p("task_id"), tr.c.tool == p("limit_tool")))

    def _trace(self) -> None:
        c, ins, tr = self.compile, self.insert, trace
        self.trace_seq = c(
            sa.update(t).where(t.c.task_id == p("task_id")).values(trace_seq=t.c.trace_seq + 1).returning(t.c.trace_seq)
        )
        self.trace_insert = c(
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
        self.trace = c(sa.select(tr).where(tr.c.task_id == p("task_id")).order_by(tr.c.seq))
        # progress: revision = max(current, given); stall resets when it advanced, else stays (pending) or grows
        advanced = p("revision", type_=BigInteger) > t.c.revision
        progress_common = {"trace_seq": t.c.trace_seq + 1, "updated_at": p("at")}
        returning = (*_counters, t.c.stalled, t.c.trace_seq)
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
        self.progress = {mode: c(stmt) for mode, stmt in progress.items()}
        self.seen = c(
            ins(seen).values(task_id=p("task_id"), key=p("key")).on_conflict_do_nothing().returning(seen.c.key)
        )
        self.seen_keys = c(  # the seen keys with a prefix: substr, not LIKE (a key's own % and _ are no wildcards)
            sa.select(seen.c.key).where(
                seen.c.task_id == p("task_id"),
                sa.func.substr(seen.c.key, 1, p("length", type_=sa.Integer)) == p("prefix", type_=sa.String),
            )
        )

    def _outcomes(self) -> None:
        c = self.compile
        self.stop = c(  # only a task without a mark: the first mark wins, and the caller learns it set it
            sa.update(t)
            .where(t.c.task_id == p("task_id"), t.c.stop_reason.is_(None))
            .values(stop_reason=p("reason"), updated_at=p("now"))
            .returning(t)
        )
        self.finish = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"), t.c.outcome.is_(None))
            .values(outcome=p("outcome"), status=p("status"), reason=p("reason"), updated_at=p("now"))
            .returning(t.c.outcome)
        )
        self.outcome = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(outcome=p("outcome"), status=p("status"), reason=p("reason"), updated_at=p("now"))
        )

    def _ledger(self) -> None:
        c, ins = self.compile, self.insert
        self.op = c(sa.select(o).where(o.c.operation_id == p("operation_id")))
        self.ops = c(sa.select(o).order_by(o.c.created_at, o.c.operation_id))
        self.ops_of = c(sa.select(o).where(o.c.task_id == p("task_id")).order_by(o.c.created_at, o.c.operation_id))
        self.op_insert = c(
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
        self.op_reopen = c(
            sa.update(o)
            .where(
                o.c.operation_id == p("operation_id"),
                o.c.state == str(OperationState.NOT_COMMITTED),
                o.c.payload == p("payload"),
            )
            .values(state=str(OperationState.UNKNOWN), result=None, attempts=o.c.attempts + 1, updated_at=p("now"))
            .returning(o)
        )
        self.op_settle = c(
            sa.update(o)
            .where(o.c.operation_id == p("op_id"))
            .values(state=p("op_state"), result=p("op_result"), updated_at=p("at"))
        )
        self.op_answer = c(
            sa.update(o)
            .where(o.c.operation_id == p("operation_id"), o.c.state == p("expected"))
            .values(state=p("state"), result=p("result"), updated_at=p("now"))
            .returning(o)
        )
        self.unknown_of_task = c(
            sa.select(o.c.operation_id)
            .where(o.c.task_id == p("task_id"), o.c.state == str(OperationState.UNKNOWN))
            .limit(1)
        )
        self.op_reconcile = c(
            sa.update(o)
            .where(o.c.operation_id == p("operation_id"), o.c.state == str(OperationState.UNKNOWN))
            .values(state=p("state"), result=p("result"), updated_at=p("now"))
            .returning(o)
        )

    def _activations(self) -> None:
        c, ins, a = self.compile, self.insert, acts
        self.activation = c(sa.select(a).where(a.c.activation_id == p("activation_id")))
        self.activations = c(sa.select(a).order_by(a.c.ordinal))
        self.activations_of = c(sa.select(a).where(a.c.flow == p("flow")).order_by(a.c.ordinal))
        self.parent = c(
            sa.select(a.c.flow, a.c.chain_id, a.c.depth, a.c.origin_operation_id)
            .select_from(o.join(a, a.c.activation_id == o.c.task_id))
            .where(o.c.operation_id == p("origin"))
        )
        self.activation_insert = c(
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

    def _pauses(self) -> None:
        c, ins, ps = self.compile, self.insert, pauses
        self.pause = c(sa.select(ps).where(ps.c.pause_id == p("pause_id")))
        self.pauses = c(sa.select(ps).order_by(ps.c.ordinal))
        self.pauses_of = c(sa.select(ps).where(ps.c.task_id == p("task_id")).order_by(ps.c.ordinal))
        self.pause_insert = c(
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
                    *TOKEN_LIMIT_COLUMNS,
                    "models",
                    "tools",
                    "cost",
                    "input_tokens",
                    "output_tokens",
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
                    *(t.c[name] for name in TOKEN_LIMIT_COLUMNS),
                    t.c.models,
                    t.c.tools,
                    t.c.cost,
                    t.c.input_tokens,
                    t.c.output_tokens,
                    p("now", type_=sa.Float),
                    sa.literal("{}"),
                ).where(t.c.task_id == p("task_id")),
            )
            .on_conflict_do_nothing(index_elements=["pause_id"])
            .returning(ps)
        )
        self.pause_decide = c(
            sa.update(ps)
            .where(ps.c.pause_id == p("pause_id"), ps.c.status == "pending")
            .values(
                status="decided",
                decisions=p("decisions"),
                decided_by=p("who"),
                decisions_digest=p("decisions_digest"),
                decided_why=p("why"),
                decided_at=p("now"),
            )
            .returning(ps)
        )
        self.pause_claim = c(
            sa.update(ps)
            .where(ps.c.pause_id == p("pause_id"), ps.c.status != "resumed")
            .values(status="resumed", resumed_at=p("now"), resumed_by=p("who"), decisions=p("decisions"))
            .returning(ps)
        )

    def _steps(self) -> None:
        c, ins, s = self.compile, self.insert, steps
        key = sa.and_(s.c.task_id == p("task_id"), s.c.step_key == p("step_key"))
        self.step = c(sa.select(s).where(key))
        self.step_begin = c(  # a new step, or one more attempt of a step that never ended; an ended one: no row
            ins(s)
            .values(task_id=p("task_id"), step_key=p("step_key"), attempts=1, done=False, updated_at=p("now"))
            .on_conflict_do_update(
                index_elements=["task_id", "step_key"],
                set_={"attempts": s.c.attempts + 1, "updated_at": p("now")},
                where=s.c.done == sa.false(),
            )
            .returning(*s.c)
        )
        self.step_end = c(
            sa.update(s)
            .where(key, s.c.done == sa.false())
            .values(done=True, output=p("output"), updated_at=p("now"))
            .returning(*s.c)
        )

    def _transitions(self) -> None:
        c, tn = self.compile, trans
        self.transitions = c(sa.select(tn).order_by(tn.c.ordinal))
        self.transitions_of = c(sa.select(tn).where(tn.c.task_id == p("task_id")).order_by(tn.c.ordinal))
        self.transition_insert = c(
            sa.insert(tn).values({col.name: p(col.name) for col in tn.c if col.name != "ordinal"})
        )
        self.reopen = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(outcome=None, status="running", reason=REOPENED, updated_at=p("now"))
        )
        self.pick_up = c(  # a run's guard opened a reopened task: it runs again
            sa.update(t)
            .where(t.c.task_id == p("task_id"), t.c.status == "running", t.c.reason == REOPENED)
            .values(reason=None)
        )
        self.recover = c(
            sa.update(t)
            .where(t.c.task_id == p("task_id"))
            .values(
                model_turns=p("model_turns"),
                tool_executions=p("tool_executions"),
                deadline=p("deadline"),
                cost_limit=p("cost_limit"),
                **{name: p(name) for name in TOKEN_LIMIT_COLUMNS},
                stop_reason=sa.case((p("clear_stop", type_=sa.Boolean), None), else_=t.c.stop_reason),
                outcome=None,
                status="running",
                reason=REOPENED,
                updated_at=p("now"),
            )
        )


_COMPILED: dict[tuple[str, str, str], Statements] = {}


def statements_for(dialect: Dialect, insert: Callable[[Table], Any]) -> Statements:
    """The store's statements for ``dialect``, compiled once per process and dialect (about 14 ms: every store
    opened after the first shares them; a :class:`Statements` is never changed after it is built)."""
    key = (dialect.name, str(dialect.driver), str(dialect.paramstyle))
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = Statements(dialect, insert)
    return compiled
