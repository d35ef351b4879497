"""The triggers that keep the metrics' counters as steps happen, in the transaction of the step (R22).

``loopguard_tallies`` holds the ended tasks by family, status and reason with their budgets summed: a task that
ends (its status leaves ``running``) adds itself, one that reopens or is pruned takes itself out. Running tasks are
not tallied (their counters move at every turn): the metrics read them through the status index.
``loopguard_refusals`` counts the calls refused before they ran, by family and rule, as each refusal's trace row is
written (a prune of the trace leaves the count), and the would-be verdicts of shadow mode under ``shadow:<rule>``.
On PostgreSQL the trigger functions keep the ``search_path`` they were created with (the store's schema), so a
session on another ``search_path`` that changes the tables still finds them, and a group is spread over
:data:`SHARDS` rows by the task id's hash, so workers that end tasks at the same
moment rarely wait on one row; SQLite has one writer at a time and one row per group.

The same statements are created with the tables (a new store) and by migration 0007 (an older store).
"""

from __future__ import annotations

from sqlalchemy import Connection

__all__ = ["SHARDS", "create_triggers", "drop_triggers", "fill_statements", "trigger_statements"]

SHARDS = 8
"""PostgreSQL: the rows one tally group is spread over (a power of two)."""

_SUMS = "tasks, models, model_turns, tools, tool_executions"
_TALLY_KEY = "(family, status, reason, shard)"
_COUNTED = "(substr({r}result_class, 1, 8) = 'refused:' OR substr({r}result_class, 1, 7) = 'shadow:')"
_REASON = (
    "(CASE WHEN substr({r}result_class, 1, 7) = 'shadow:' THEN {r}result_class ELSE substr({r}result_class, 9) END)"
)
"""A refusal's rule (``refused:same_call`` counts as ``same_call``); a shadow verdict keeps its prefix
(``shadow:same_call``), so the two counters share one table and one trigger."""
_ADD = ", ".join(f"{c} = {{t}}{c} + excluded.{c}" for c in _SUMS.split(", "))


def _sqlite_tally(row: str, sign: str) -> str:
    values = f"{row}.family, {row}.status, COALESCE({row}.reason, ''), 0, {sign}1, {sign}{row}.models, " + (
        f"{sign}{row}.model_turns, {sign}{row}.tools, {sign}{row}.tool_executions"
    )
    return (
        f"INSERT INTO loopguard_tallies (family, status, reason, shard, {_SUMS}) SELECT {values} "
        f"WHERE {row}.status <> 'running' ON CONFLICT {_TALLY_KEY} DO UPDATE SET {_ADD.format(t='')};"
    )


SQLITE = (
    "CREATE TRIGGER loopguard_tasks_tally_insert AFTER INSERT ON loopguard_tasks WHEN NEW.status <> 'running' "
    f"BEGIN {_sqlite_tally('NEW', '')} END",
    "CREATE TRIGGER loopguard_tasks_tally_update AFTER UPDATE OF status, reason ON loopguard_tasks "
    "WHEN OLD.status IS NOT NEW.status OR OLD.reason IS NOT NEW.reason "
    f"BEGIN {_sqlite_tally('OLD', '-')} {_sqlite_tally('NEW', '')} END",
    "CREATE TRIGGER loopguard_tasks_tally_delete AFTER DELETE ON loopguard_tasks WHEN OLD.status <> 'running' "
    f"BEGIN {_sqlite_tally('OLD', '-')} END",
    "CREATE TRIGGER loopguard_trace_refusal AFTER INSERT ON loopguard_trace "
    f"WHEN {_COUNTED.format(r='NEW.')} BEGIN INSERT INTO loopguard_refusals "
    "(family, reason, shard, count) SELECT COALESCE((SELECT family FROM "
    f"loopguard_tasks WHERE task_id = NEW.task_id), 'other'), {_REASON.format(r='NEW.')}, 0, 1 WHERE true "
    "ON CONFLICT (family, reason, shard) DO UPDATE SET count = count + 1; END",
)


def _pg_tally(row: str, sign: str) -> str:
    return (
        f"INSERT INTO loopguard_tallies AS t (family, status, reason, shard, {_SUMS}) VALUES ({row}.family, "
        f"{row}.status, COALESCE({row}.reason, ''), hashtext({row}.task_id) & {SHARDS - 1}, {sign}1, "
        f"{sign}{row}.models, {sign}{row}.model_turns, {sign}{row}.tools, {sign}{row}.tool_executions) "
        f"ON CONFLICT {_TALLY_KEY} DO UPDATE SET {_ADD.format(t='t.')};"
    )


POSTGRES = (
    "CREATE OR REPLACE FUNCTION loopguard_tally() RETURNS trigger LANGUAGE plpgsql "
    "SET search_path FROM CURRENT AS $$ BEGIN "
    f"IF TG_OP <> 'INSERT' AND OLD.status <> 'running' THEN {_pg_tally('OLD', '-')} END IF; "
    f"IF TG_OP <> 'DELETE' AND NEW.status <> 'running' THEN {_pg_tally('NEW', '')} END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER loopguard_tasks_tally_insert AFTER INSERT ON loopguard_tasks FOR EACH ROW "
    "WHEN (NEW.status <> 'running') EXECUTE FUNCTION loopguard_tally()",
    "CREATE TRIGGER loopguard_tasks_tally_update AFTER UPDATE OF status, reason ON loopguard_tasks FOR EACH ROW "
    "WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.reason IS DISTINCT FROM NEW.reason) "
    "EXECUTE FUNCTION loopguard_tally()",
    "CREATE TRIGGER loopguard_tasks_tally_delete AFTER DELETE ON loopguard_tasks FOR EACH ROW "
    "WHEN (OLD.status <> 'running') EXECUTE FUNCTION loopguard_tally()",
    "CREATE OR REPLACE FUNCTION loopguard_refusal() RETURNS trigger LANGUAGE plpgsql "
    "SET search_path FROM CURRENT AS $$ BEGIN "
    "INSERT INTO loopguard_refusals AS r (family, reason, shard, count) VALUES (COALESCE((SELECT family FROM "
    f"loopguard_tasks WHERE task_id = NEW.task_id), 'other'), {_REASON.format(r='NEW.')}, "
    f"hashtext(NEW.task_id) & {SHARDS - 1}, 1) ON CONFLICT (family, reason, shard) DO UPDATE SET count = r.count + 1; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER loopguard_trace_refusal AFTER INSERT ON loopguard_trace FOR EACH ROW "
    f"WHEN ({_COUNTED.format(r='NEW.')}) EXECUTE FUNCTION loopguard_refusal()",
)


def trigger_statements(dialect: str) -> tuple[str, ...]:
    """The statements that create the triggers (and PostgreSQL's trigger functions) on ``dialect``."""
    return POSTGRES if dialect == "postgresql" else SQLITE


def create_triggers(conn: Connection) -> None:
    """Create the triggers in the store's database (its tables exist)."""
    for statement in trigger_statements(conn.dialect.name):
        conn.exec_driver_sql(statement)


def fill_statements(dialect: str) -> tuple[str, str]:
    """The statements that fill empty ``loopguard_tallies`` and ``loopguard_refusals`` from the tasks and the trace a
    database holds (migration 0007, and a bulk load that ran without the triggers)."""
    postgres = dialect == "postgresql"
    shard = f"(hashtext({{0}}task_id) & {SHARDS - 1})" if postgres else "0"
    by = f", {shard}" if postgres else ""  # (SQLite reads a number in GROUP BY as a column's position)
    tallies = (
        "INSERT INTO loopguard_tallies (family, status, reason, shard, tasks, models, model_turns, tools, "
        f"tool_executions) SELECT family, status, COALESCE(reason, ''), {shard.format('')}, count(*), sum(models), "
        "sum(model_turns), sum(tools), sum(tool_executions) FROM loopguard_tasks WHERE status <> 'running' "
        f"GROUP BY family, status, COALESCE(reason, ''){by.format('')}"
    )
    refusals = (
        "INSERT INTO loopguard_refusals (family, reason, shard, count) SELECT COALESCE(t.family, 'other'), "
        f"{_REASON.format(r='r.')}, {shard.format('r.')}, count(*) FROM loopguard_trace r LEFT JOIN loopguard_tasks t "
        f"ON t.task_id = r.task_id WHERE {_COUNTED.format(r='r.')} "
        f"GROUP BY COALESCE(t.family, 'other'), {_REASON.format(r='r.')}{by.format('r.')}"
    )
    return tallies, refusals


def drop_triggers(conn: Connection) -> None:
    """Drop the triggers (a bulk load drops them, loads, fills the tallies and creates them again)."""
    postgres = conn.dialect.name == "postgresql"
    for name, table in (
        ("loopguard_tasks_tally_insert", "loopguard_tasks"),
        ("loopguard_tasks_tally_update", "loopguard_tasks"),
        ("loopguard_tasks_tally_delete", "loopguard_tasks"),
        ("loopguard_trace_refusal", "loopguard_trace"),
    ):
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}" + (f" ON {table}" if postgres else ""))
