"""The operation an operator's answer (reconcile, confirm, correct) was about, on its transition.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("loopguard_transitions", sa.Column("operation_id", sa.String(), nullable=True))
    op.execute("UPDATE loopguard_meta SET value = '3' WHERE key = 'schema_version'")


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
