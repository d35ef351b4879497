"""The steps of durable engines' workflows a task saw (R17: durable replays count once).

A durable engine (DBOS, Temporal, Restate) replays a workflow after a crash: a tool execution it re-runs is answered
from ``loopguard_steps`` (what the model read, recorded once), and a step it re-executes counts as one more attempt.
Tasks of older versions have no steps: nothing to move.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "loopguard_steps",
        sa.Column("task_id", sa.String(), primary_key=True),
        sa.Column("step_key", sa.String(), primary_key=True),
        sa.Column("attempts", sa.BigInteger(), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sqlite_with_rowid=False,
    )
    op.execute("UPDATE loopguard_meta SET value = '6' WHERE key = 'schema_version'")


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
