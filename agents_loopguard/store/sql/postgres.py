"""The hot steps on PostgreSQL, each *one* statement: the conditional pieces of the SQLite transactions composed
as data-modifying CTEs, so a guarded read costs two round trips and a guarded write two.

The statements run in autocommit at ``REPEATABLE READ``: a statement that lost a race to a concurrent one fails with
a serialization error and runs again from a fresh snapshot. Each returns, beside what it changed, the task row (and
repetition count) its snapshot saw, so a refusal is explained by the rules without another round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import sqlalchemy as sa

from ...values.errors import StoreError
from ..base import (
    Grant,
    OperationClaim,
    Progress,
    TaskSnapshot,
    WriteReservation,
    operation_blocks,
)
from ..rules import execution_refusal, turn_refusal, unknown_task
from .connection import LostRace
from .sqlite import SQLiteSteps
from .statements import Compiled, Statements, execute, fetch_one
from .tables import loads, operation, ops, reps, seen, snapshot, task_state, tasks, tool_runs, trace, usage

__all__ = ["PostgresSteps"]

T, OP, R, TR, S, TRN = (x.name for x in (tasks, ops, reps, trace, seen, tool_runs))
TRACE_COLS = (
    "task_id, seq, kind, tool, args, result_class, revision, models, tools, fingerprint, operation_id, "
    "operation_state, at"
)
TRACE_VALS = (
    ":kind, :tool, :args, :result_class, :e_revision, :e_models, :e_tools, :fingerprint, :operation_id, "
    ":operation_state, :at"
)
TASK_COLS = (
    "task_id, revision, models, tools, cost, input_tokens, output_tokens, model_turns, tool_executions, stop_reason, "
    "status"
)
"""What a reservation statement reads of the task row (the limits it checks and what a refusal reports)."""
OK_TASK = "t.stop_reason IS NULL AND t.status = 'running' AND t.tools < t.tool_executions"
GRANTED = (
    "u.models AS g_models, u.tools AS g_tools, u.cost AS g_cost, u.input_tokens AS g_input_tokens, "
    "u.output_tokens AS g_output_tokens, u.revision AS g_revision, u.stalled AS g_stalled"
)
"""The counters after a grant (``g_``), read from the task update ``u``."""
COUNTERS = "revision, models, tools, cost, input_tokens, output_tokens, stalled"
TAIL = f"t.*, {GRANTED}, rep.count AS rep_count, rep.first_at AS rep_first_at"
TOOL_FITS = f"COALESCE((SELECT count FROM {TRN} WHERE task_id = :task_id AND tool = :limit_tool), 0) < :tool_max"
"""A reservation that names a per-tool limit: the tool ran fewer times than allowed (in the statement's snapshot)."""
TOOL_COUNT = f"""
    tl AS (
      INSERT INTO {TRN} (task_id, tool, count) SELECT task_id, :limit_tool, 1 FROM r
      ON CONFLICT (task_id, tool) DO UPDATE SET count = {TRN}.count + 1
      RETURNING task_id),"""
TOOL_SEEN = f"LEFT JOIN {TRN} tlc ON tlc.task_id = t.task_id AND tlc.tool = :limit_tool"
REP_JOIN = (
    f"LEFT JOIN {R} rep ON rep.task_id = t.task_id AND rep.fingerprint = :fingerprint AND rep.revision = t.revision"
)
OP_COLS = "operation_id, task_id, tool, payload, state, result, attempts, created_at, updated_at"
OP_OUT = ", ".join(f"{{0}}.{col} AS {{1}}{col}" for col in OP_COLS.split(", "))


def _repeat(source: str, wait: bool) -> str:
    cond = f"{R}.count < :max_repeats" + (f" AND :now - {R}.first_at < :max_wait" if wait else "")
    return f"""
            r AS (
              INSERT INTO {R} (task_id, fingerprint, revision, count, first_at)
              SELECT task_id, :fingerprint, revision, 1, :now FROM {source}
              ON CONFLICT (task_id, fingerprint, revision) DO UPDATE SET count = {R}.count + 1 WHERE {cond}
              RETURNING task_id)"""


TURN = f"""
    WITH t AS (SELECT {TASK_COLS} FROM {T} WHERE task_id = :task_id),
    u AS (
      UPDATE {T} SET models = models + 1, trace_seq = trace_seq + 1, updated_at = :now
      WHERE task_id = :task_id AND stop_reason IS NULL AND status = 'running' AND models < model_turns
      RETURNING task_id, {COUNTERS}, trace_seq),
    tr AS (
      INSERT INTO {TR} (task_id, seq, kind, result_class, revision, models, tools, at)
      SELECT task_id, trace_seq, 'model', 'reserved', revision, models, tools, :now FROM u)
    SELECT t.*, {GRANTED}
    FROM t LEFT JOIN u ON true
    """


def _execution(wait: bool, tool: bool) -> str:
    return f"""
    WITH t AS (SELECT {TASK_COLS} FROM {T} WHERE task_id = :task_id),
    ok AS (SELECT task_id, revision FROM t WHERE {OK_TASK} {"AND " + TOOL_FITS if tool else ""}),
    {_repeat("ok", wait)},{TOOL_COUNT if tool else ""}
    u AS (
      UPDATE {T} SET tools = {T}.tools + 1, updated_at = :now FROM r WHERE {T}.task_id = r.task_id
      RETURNING {", ".join(f"{T}.{col}" for col in COUNTERS.split(", "))})
    SELECT {TAIL}{", tlc.count AS tool_runs" if tool else ""} FROM t LEFT JOIN u ON true {REP_JOIN}
    {TOOL_SEEN if tool else ""}
    """


def _write(tool: bool) -> str:
    return f"""
    WITH t AS (SELECT {TASK_COLS} FROM {T} WHERE task_id = :task_id),
    o AS (SELECT {OP_COLS} FROM {OP} WHERE operation_id = :operation_id),
    ok AS (
      SELECT task_id, revision FROM t WHERE {OK_TASK} {"AND " + TOOL_FITS if tool else ""}
      AND NOT EXISTS (SELECT 1 FROM o WHERE NOT (o.state = 'not_committed' AND o.payload = :fingerprint))),
    {_repeat("ok", False)},{TOOL_COUNT if tool else ""}
    ins AS (
      INSERT INTO {OP} ({OP_COLS})
      SELECT :operation_id, :task_id, :tool, :fingerprint, 'unknown', NULL, 1, :now, :now FROM r
      WHERE NOT EXISTS (SELECT 1 FROM o)
      ON CONFLICT (operation_id) DO NOTHING
      RETURNING {OP_COLS}),
    reo AS (
      UPDATE {OP} SET state = 'unknown', result = NULL, attempts = {OP}.attempts + 1, updated_at = :now FROM r
      WHERE {OP}.operation_id = :operation_id AND {OP}.state = 'not_committed' AND {OP}.payload = :fingerprint
      RETURNING {", ".join(f"{OP}.{col}" for col in OP_COLS.split(", "))}),
    c AS (SELECT * FROM ins UNION ALL SELECT * FROM reo),
    u AS (
      UPDATE {T} SET tools = tools + 1, updated_at = :now
      WHERE task_id = :task_id AND EXISTS (SELECT 1 FROM c)
      RETURNING {", ".join(f"{T}.{col}" for col in COUNTERS.split(", "))})
    SELECT {TAIL}, (SELECT count(*) FROM r) AS repeated,
      {OP_OUT.format("o", "o_")}, {OP_OUT.format("c", "c_")}{", tlc.count AS tool_runs" if tool else ""}
    FROM (SELECT 1) one LEFT JOIN t ON true LEFT JOIN u ON true {REP_JOIN}
    LEFT JOIN o ON true LEFT JOIN c ON true {TOOL_SEEN if tool else ""}
    """


TASK = f"""
    WITH i AS (
      INSERT INTO {T} (task_id, model_turns, tool_executions, deadline, cost_limit, input_token_limit,
        output_token_limit, total_token_limit, models, tools, cost, input_tokens, output_tokens,
        revision, stalled, status, trace_seq, created_at, updated_at, family)
      VALUES (:task_id, :model_turns, :tool_executions, :deadline, :cost_limit, :input_token_limit,
        :output_token_limit, :total_token_limit, 0, 0, 0.0, 0, 0,
        :revision, 0, 'running', 0, :now, :now, :family)
      ON CONFLICT (task_id) DO NOTHING
      RETURNING *)
    SELECT *, true AS created FROM i
    UNION ALL SELECT *, false AS created FROM {T} WHERE task_id = :task_id AND NOT EXISTS (SELECT 1 FROM i)
    """

FINISH = f"""
    WITH u AS (
      UPDATE {T} SET outcome = :outcome, status = :status, reason = :reason, updated_at = :now
      WHERE task_id = :task_id AND outcome IS NULL
      RETURNING outcome)
    SELECT outcome FROM u
    UNION ALL SELECT outcome FROM {T} WHERE task_id = :task_id AND NOT EXISTS (SELECT 1 FROM u)
    """

TRACE = f"""
    WITH u AS (UPDATE {T} SET trace_seq = trace_seq + 1 WHERE task_id = :task_id RETURNING task_id, trace_seq)
    INSERT INTO {TR} ({TRACE_COLS}) SELECT task_id, trace_seq, {TRACE_VALS} FROM u RETURNING seq
    """

_PROGRESS_SET = {
    "none": "",
    "pending": """, revision = GREATEST(revision, :revision),
        stalled = CASE WHEN :revision > revision THEN 0 ELSE stalled END""",
    "step": """, revision = GREATEST(revision, :revision),
        stalled = CASE WHEN :revision > revision THEN 0 ELSE stalled + 1 END""",
}
"""How a recorded result moves the progress: not at all, a pending poll (no stall), a step (stall unless advanced)."""


def _record(mode: str, with_op: bool, with_seen: bool) -> str:
    """The trace entry, the progress, the write's ledger state and the seen keys of one result, in one statement."""
    parts = [
        f"""u AS (
          UPDATE {T} SET trace_seq = trace_seq + 1, updated_at = :at {_PROGRESS_SET[mode]}
          WHERE task_id = :task_id
          RETURNING task_id, revision, stalled, models, tools, cost, input_tokens, output_tokens, trace_seq)""",
        f"""tr AS (INSERT INTO {TR} ({TRACE_COLS}) SELECT task_id, trace_seq, {TRACE_VALS} FROM u)""",
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
    return "WITH " + ",\n".join(parts) + f"\nSELECT u.*, {fresh} AS fresh FROM u"


class PostgresSteps(SQLiteSteps):
    """The hot steps as one statement each; the cold ones are the transactions of :class:`~.sqlite.SQLiteSteps`."""

    def __init__(self, statements: Statements) -> None:
        super().__init__(statements)
        c: Callable[[sa.ClauseElement], Compiled] = statements.compile
        self.q_turn = c(sa.text(TURN))
        self.q_execution = {
            (wait, tool): c(sa.text(_execution(wait, tool))) for wait in (False, True) for tool in (False, True)
        }
        self.q_write = {tool: c(sa.text(_write(tool))) for tool in (False, True)}
        self.q_task = c(sa.text(TASK))
        self.q_finish = c(sa.text(FINISH))
        self.q_trace = c(sa.text(TRACE))
        self.q_record = {
            (mode, with_op, with_seen): c(sa.text(_record(mode, with_op, with_seen)))
            for mode in _PROGRESS_SET
            for with_op in (False, True)
            for with_seen in (False, True)
        }

    def ensure_task(self, cur: Any, params: dict[str, Any]) -> tuple[TaskSnapshot, bool]:
        row = fetch_one(cur, self.q_task, params)
        if row is None:
            raise LostRace  # created by another worker after this statement's snapshot
        return self.picked_up(cur, snapshot(row)), bool(row["created"])

    def reserve_turn(self, cur: Any, params: dict[str, Any]) -> Grant:
        row = fetch_one(cur, self.q_turn, params)
        if row is None:
            raise unknown_task(params["task_id"])
        if row["g_models"] is None:
            return self.explained(turn_refusal(task_state(row)))
        return Grant(True, None, usage(row, "g_"), int(row["g_revision"]), stalled=int(row["g_stalled"]))

    def reserve_execution(self, cur: Any, params: dict[str, Any], *, poll: bool) -> Grant:
        if params["max_repeats"] < 1:
            return self.execution_refusal(cur, self.get_task(cur, params["task_id"]), params, poll=poll)
        row = fetch_one(cur, self.q_execution[(params["max_wait"] is not None, params["tool_max"] is not None)], params)
        if row is None:
            raise unknown_task(params["task_id"])
        if row["g_tools"] is not None:
            return Grant(True, None, usage(row, "g_"), int(row["g_revision"]), stalled=int(row["g_stalled"]))
        return self.explained(self._refusal_seen(row, params, poll=poll))

    @staticmethod
    def _refusal_seen(row: Any, params: dict[str, Any], *, poll: bool = False) -> Grant | None:
        """The refusal of the task row, repetition count and tool count that the statement's snapshot saw."""
        limited = params.get("tool_max") is not None
        return execution_refusal(
            task_state(row),
            int(row["rep_count"] or 0),
            row["rep_first_at"],
            max_repeats=params["max_repeats"],
            now=params["now"],
            poll=poll,
            max_wait=params.get("max_wait"),
            tool_limit=(params["limit_tool"], params["tool_max"]) if limited else None,
            tool_runs=int(row["tool_runs"] or 0) if limited else 0,
        )

    def reserve_write(self, cur: Any, params: dict[str, Any]) -> WriteReservation:
        fingerprint = params["fingerprint"]
        if params["max_repeats"] < 1:
            existing = fetch_one(cur, self.st.op, params)
            if existing is not None and operation_blocks(existing["state"], existing["payload"], fingerprint):
                return WriteReservation(None, OperationClaim(False, operation(existing)))
            return WriteReservation(self.execution_refusal(cur, self.get_task(cur, params["task_id"]), params), None)
        row = fetch_one(cur, self.q_write[params["tool_max"] is not None], params)
        if row["o_operation_id"] is not None and operation_blocks(row["o_state"], row["o_payload"], fingerprint):
            return WriteReservation(None, OperationClaim(False, operation(row, "o_")))
        if row["task_id"] is None:
            raise unknown_task(params["task_id"])
        if row["g_tools"] is not None and row["c_operation_id"] is not None:
            grant = Grant(True, None, usage(row, "g_"), int(row["g_revision"]), stalled=int(row["g_stalled"]))
            return WriteReservation(grant, OperationClaim(True, operation(row, "c_")))
        if row["repeated"]:  # pragma: no cover - REPEATABLE READ turns this race into a serialization failure
            raise StoreError(f"reserve_write({params['operation_id']!r}): counted a repetition without a claim")
        return WriteReservation(self.explained(self._refusal_seen(row, params)), None)

    def record_execution(self, cur: Any, params: dict[str, Any], *, mode: str, seen: Sequence[str]) -> Progress:
        row = fetch_one(cur, self.q_record[(mode, "op_id" in params, bool(params["keys"]))], params)
        if row is None:
            raise unknown_task(params["task_id"])
        fresh = set(row["fresh"] or ())
        return Progress(int(row["revision"]), int(row["stalled"]), tuple(k not in fresh for k in seen), usage(row))

    def append_trace(self, cur: Any, params: dict[str, Any]) -> None:
        if fetch_one(cur, self.q_trace, params) is None:
            raise unknown_task(params["task_id"])

    def deferred_trace(self, cur: Any, params: dict[str, Any]) -> None:
        """A trace row sent ahead of the next step's statement, its result not read (see ``Database.defer``)."""
        execute(cur, self.q_trace, params)

    def deferred_record(self, cur: Any, params: dict[str, Any], *, mode: str) -> None:
        """A read's result sent ahead of the next step's statement, its result not read."""
        execute(cur, self.q_record[(mode, False, bool(params["keys"]))], params)

    def finish(self, cur: Any, params: dict[str, Any]) -> dict[str, Any]:
        row = fetch_one(cur, self.q_finish, params)
        if row is None:
            raise unknown_task(params["task_id"])
        return cast(dict[str, Any], loads(row["outcome"]))
