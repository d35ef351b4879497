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
    op.execute(sa.text("UPDATE loopguard_meta SET value = :v WHERE key = 'schema_version'").bindparams(v=str(int(revision))))


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
