"""The digest of a pause's recorded decisions (over the pause, the decisions and who decided).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("loopguard_pauses", sa.Column("decisions_digest", sa.String(), nullable=True))
    op.execute("UPDATE loopguard_meta SET value = '4' WHERE key = 'schema_version'")


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
