"""Operations over time (R22): the operators' pages read indexes, the metrics read tallies, a prune finds its rows.

- ``loopguard_tasks`` gains ``family`` (the bounded label its metrics are summed under, derived from the task id by
  :func:`agents_loopguard.values.families.task_family`, or the flow's name for a workflow's activation) and
  ``reason`` (its outcome's reason, for the pages and the tallies), both filled in for every existing task;
- indexes for the pages (tasks by creation and by status, reason, family; operations by creation and state; pauses
  by creation and status; transitions by time; activations by creation);
- ``loopguard_tallies`` (ended tasks by family, status and reason, budgets summed) and ``loopguard_refusals``
  (refused calls by family and rule), filled from the existing tasks and trace, then kept by triggers.

``--dry-run`` prints the SQL; the families are derived in Python while migrating (the dry run shows them as a
comment).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from agents_loopguard.store.sql.tallies import fill_statements, trigger_statements
from agents_loopguard.values.families import named_family, task_family

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

PAGES = {
    "loopguard_tasks": [
        ("created_at", ["created_at", "task_id"]),
        ("status", ["status", "created_at", "task_id"]),
        ("reason", ["reason", "created_at", "task_id"]),
        ("family", ["family", "created_at", "task_id"]),
    ],
    "loopguard_operations": [
        ("created_at", ["created_at", "operation_id"]),
        ("state", ["state", "created_at", "operation_id"]),
    ],
    "loopguard_pauses": [("created_at", ["created_at", "pause_id"]), ("status", ["status", "created_at", "pause_id"])],
    "loopguard_transitions": [("at", ["at", "transition_id"])],
    "loopguard_activations": [("created_at", ["created_at"])],
}
"""The indexes the pages read, as :mod:`agents_loopguard.store.sql.tables` declares them."""
BATCH = 5000


def _columns() -> None:
    op.add_column(
        "loopguard_tasks",
        sa.Column("family", sa.String(length=40), nullable=False, server_default="other"),
    )
    op.add_column("loopguard_tasks", sa.Column("reason", sa.String(), nullable=True))
    if op.get_context().dialect.name == "postgresql":
        op.alter_column("loopguard_tasks", "family", server_default=None)  # as a new store's table: no default


def _families() -> None:
    """Each task's family from its id (or its flow's name), written in batches."""
    if context.is_offline_mode():
        op.execute("-- families: derived from each task id in Python while migrating (task_family)")
        return
    conn = op.get_bind()
    rows = conn.exec_driver_sql("SELECT activation_id, flow FROM loopguard_activations").fetchall()
    flows: dict[str, str] = {str(a): str(f) for a, f in rows}
    update = sa.text("UPDATE loopguard_tasks SET family = :family WHERE task_id = :task_id")
    batch: list[dict[str, str]] = []
    for (task_id,) in conn.exec_driver_sql("SELECT task_id FROM loopguard_tasks").fetchall():
        family = named_family(None, flows.get(task_id)) or task_family(task_id)
        if family != "other":
            batch.append({"family": family, "task_id": task_id})
        if len(batch) >= BATCH:
            conn.execute(update, batch)
            batch = []
    if batch:
        conn.execute(update, batch)


def _reasons(postgres: bool) -> None:
    reason = "CAST(outcome AS json) ->> 'reason'" if postgres else "json_extract(outcome, '$.reason')"
    op.execute(f"UPDATE loopguard_tasks SET reason = {reason} WHERE outcome IS NOT NULL")


def _tables() -> None:
    big = sa.BigInteger()
    op.create_table(
        "loopguard_tallies",
        sa.Column("family", sa.String(length=40), primary_key=True),
        sa.Column("status", sa.String(), primary_key=True),
        sa.Column("reason", sa.String(), primary_key=True),
        sa.Column("shard", sa.Integer(), primary_key=True, autoincrement=False),
        *(sa.Column(name, big, nullable=False) for name in ("tasks", "models", "model_turns", "tools")),
        sa.Column("tool_executions", big, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "loopguard_refusals",
        sa.Column("family", sa.String(length=40), primary_key=True),
        sa.Column("reason", sa.String(), primary_key=True),
        sa.Column("shard", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("count", big, nullable=False),
        sqlite_with_rowid=False,
    )


def _fill_tallies(postgres: bool) -> None:
    for statement in fill_statements("postgresql" if postgres else "sqlite"):
        op.execute(statement)


def upgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    _columns()
    _families()
    _reasons(postgres)
    _tables()
    _fill_tallies(postgres)
    for table, indexes in PAGES.items():
        for suffix, columns in indexes:
            op.create_index(f"ix_{table}_{suffix}", table, columns)
    for statement in trigger_statements("postgresql" if postgres else "sqlite"):
        op.execute(statement)
    op.execute("UPDATE loopguard_meta SET value = '7' WHERE key = 'schema_version'")


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
