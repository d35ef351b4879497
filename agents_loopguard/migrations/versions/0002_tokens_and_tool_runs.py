"""Token limits and counters of tasks and pauses, and the per-task count of each tool's executions.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("loopguard_tasks", "loopguard_pauses"):
        for limit in ("input_token_limit", "output_token_limit", "total_token_limit"):
            op.add_column(table, sa.Column(limit, sa.BigInteger(), nullable=True))
        for counter in ("input_tokens", "output_tokens"):
            op.add_column(table, sa.Column(counter, sa.BigInteger(), nullable=False, server_default=sa.text("0")))
    op.create_table(
        "loopguard_tool_runs",
        sa.Column("task_id", sa.String(), primary_key=True),
        sa.Column("tool", sa.String(), primary_key=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sqlite_with_rowid=False,
    )
    op.execute("UPDATE loopguard_meta SET value = '2' WHERE key = 'schema_version'")


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
