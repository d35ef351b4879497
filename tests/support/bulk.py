"""A store of many generated tasks, loaded in bulk through the store's own tables (for the scale tests and
``benchmarks/bench_scale.py``): minutes for a million tasks, not the hours the guard's own steps would take.

The tasks look like a team's months of work: most ended (completed; some stopped on ``same_call`` with the refusal
in their trace), a few still running, some waiting on a write whose effect is unknown; ids of three families
(``ticket-N``, ``order-N`` and uuids). The triggers that keep the metrics' tallies are dropped during the load and
the tallies filled from the loaded rows afterwards, as migration 0007 fills them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from agents_loopguard.store.sql import SQLStore
from agents_loopguard.store.sql.tables import ops, reps, tasks, trace
from agents_loopguard.store.sql.tallies import create_triggers, drop_triggers, fill_statements

DAY = 86_400.0
CHUNK = 5_000
IN_FLIGHT = 5_000
"""With ``fill(healthy=True)``, only the last tasks created may still be running."""


@dataclass(frozen=True)
class Shape:
    """What task ``i`` of a generated store is."""

    task_id: str
    family: str
    status: str
    reason: str | None


def shape(i: int, recent: int | None = None) -> Shape:
    """Task ``i``: 60% ``ticket-i``, 30% uuid ids, 10% ``order-i``; 2% running, 2% waiting on an unknown write,
    5% stopped on ``same_call``, the rest completed. ``recent``: the number of tasks created after this one, when
    only the last ones still run (then 2% of the last 5,000 run, and one in 1,000 waits on an unknown write), as in a
    store whose workers are healthy."""
    kind = i % 10
    if kind < 6:
        task_id, family = f"ticket-{i}", "ticket"
    elif kind < 9:
        task_id, family = str(uuid.UUID(int=i + 1)), "id"
    else:
        task_id, family = f"order-{i}", "order"
    live = recent is None or recent < IN_FLIGHT
    if i % 50 == 0 and live:
        return Shape(task_id, family, "running", None)
    if i % (50 if recent is None else 1000) == 1:
        return Shape(task_id, family, "needs_reconciliation", "executor_exception")
    if i % 20 == 2:
        return Shape(task_id, family, "stopped", "same_call")
    return Shape(task_id, family, "completed", "validated_done")


def _rows(
    first: int, last: int, *, calls: int, start: float, step: float, end: int | None
) -> Iterator[dict[str, list[Any]]]:
    task_rows: list[Any] = []
    trace_rows: list[Any] = []
    op_rows: list[Any] = []
    rep_rows: list[Any] = []
    for i in range(first, last):
        s = shape(i, None if end is None else end - 1 - i)
        created = start + i * step
        updated = created + 60.0
        models, tools = (calls + 1) // 2, calls // 2
        outcome = None
        if s.reason is not None:
            outcome = json.dumps({"task_id": s.task_id, "status": s.status, "reason": s.reason}, separators=(",", ":"))
        task_rows.append(
            {
                **dict.fromkeys(("deadline", "cost_limit", "stop_reason"), None),
                **dict.fromkeys(("input_token_limit", "output_token_limit", "total_token_limit"), None),
                "task_id": s.task_id,
                "model_turns": models + 2,
                "tool_executions": tools + 2,
                "models": models,
                "tools": tools,
                "cost": 0.0,
                "input_tokens": 0,
                "output_tokens": 0,
                "revision": tools,
                "stalled": 0,
                "status": s.status,
                "outcome": outcome,
                "trace_seq": calls,
                "created_at": created,
                "updated_at": updated,
                "family": s.family,
                "reason": s.reason,
            }
        )
        for seq in range(1, calls + 1):
            tool = seq % 2 == 0
            refused = s.reason == "same_call" and seq == calls
            trace_rows.append(
                {
                    "task_id": s.task_id,
                    "seq": seq,
                    "kind": "tool" if tool else "model",
                    "tool": "search" if tool else None,
                    "args": '{"q":"refund policy"}' if tool else None,
                    "result_class": "refused:same_call" if refused else ("ok" if tool else "reserved"),
                    "revision": seq // 2,
                    "models": (seq + 1) // 2,
                    "tools": seq // 2,
                    "fingerprint": f"fp-{i}-{seq}" if tool else None,
                    "operation_id": None,
                    "operation_state": None,
                    "at": created + seq,
                }
            )
        if tools:
            rep_rows.append(
                {"task_id": s.task_id, "fingerprint": f"fp-{i}-2", "revision": 1, "count": 1, "first_at": created}
            )
        if s.status == "needs_reconciliation" or i % 5 == 3:
            state = "unknown" if s.status == "needs_reconciliation" else "committed"
            op_rows.append(
                {
                    "operation_id": f"op-{i}",
                    "task_id": s.task_id,
                    "tool": "pay",
                    "payload": f"fp-op-{i}",
                    "state": state,
                    "result": '{"receipt":"r"}' if state == "committed" else None,
                    "attempts": 1,
                    "created_at": created + 2,
                    "updated_at": updated,
                }
            )
    yield {"tasks": task_rows, "trace": trace_rows, "ops": op_rows, "reps": rep_rows}


def _insert(conn: Any, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Rows into ``table`` by the driver's fastest path: PostgreSQL's COPY, SQLite's executemany."""
    if not rows:
        return
    columns = list(rows[0])
    raw = conn.connection.dbapi_connection
    if conn.dialect.name == "postgresql":
        with raw.cursor() as cur, cur.copy(f"COPY {table.name} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([row[c] for c in columns])
        return
    marks = ", ".join("?" for _ in columns)
    raw.executemany(
        f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({marks})", [[r[c] for c in columns] for r in rows]
    )


def fill(
    url: str,
    count: int,
    *,
    calls: int = 10,
    start: float | None = None,
    days: float = 90.0,
    first: int = 0,
    healthy: bool = False,
) -> dict[str, Any]:
    """Load ``count`` generated tasks (numbered from ``first``) of ``calls`` trace rows each into the store at
    ``url`` (created if empty), created evenly over the ``days`` before ``start`` (now); returns what it loaded.
    ``healthy``: only the last tasks run and few writes are unknown (see :func:`shape`); else 2% of every age."""
    began = time.perf_counter()
    with SQLStore(url) as store:
        store.task("-")  # opens (and creates) the store's tables
    engine = sa.create_engine(url)  # transactions of its own (the store's engine runs each statement on its own)
    start = (time.time() - days * DAY) if start is None else start
    step = days * DAY / max(1, count)
    with engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA cache_size = -262144")  # 256 MB: the load's pages stay in memory
        drop_triggers(conn)
        for low in range(first, first + count, CHUNK):
            end = first + count if healthy else None
            for batch in _rows(low, min(low + CHUNK, first + count), calls=calls, start=start, step=step, end=end):
                _insert(conn, tasks, batch["tasks"])
                _insert(conn, trace, batch["trace"])
                _insert(conn, ops, batch["ops"])
                _insert(conn, reps, batch["reps"])
        conn.execute(sa.text("DELETE FROM loopguard_tallies"))
        conn.execute(sa.text("DELETE FROM loopguard_refusals"))
        for statement in fill_statements(conn.dialect.name):
            conn.exec_driver_sql(statement)
        create_triggers(conn)
    if engine.dialect.name == "postgresql":  # as autovacuum would (a SQLite store is read without statistics)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
    engine.dispose()
    return {"tasks": count, "calls": calls, "seconds": time.perf_counter() - began, "start": start, "step": step}
