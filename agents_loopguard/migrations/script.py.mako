"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}
revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}
    op.execute("UPDATE loopguard_meta SET value = '<N>' WHERE key = 'schema_version'")  # N: this revision's number


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
