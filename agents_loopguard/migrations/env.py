"""How Alembic runs the store's migrations: on the connection :mod:`agents_loopguard.store.sql.migrate` hands it (in
its transaction), or offline for ``--dry-run`` (the SQL is written, nothing runs)."""

from __future__ import annotations

from alembic import context

from agents_loopguard.store.sql.schema import VERSION_TABLE
from agents_loopguard.store.sql.tables import METADATA


def run() -> None:
    """Run the migrations Alembic asked for, online or offline."""
    config = context.config
    if context.is_offline_mode():
        context.configure(
            dialect_name=config.attributes["dialect"],
            literal_binds=True,
            version_table=VERSION_TABLE,
            target_metadata=METADATA,
            transactional_ddl=True,
        )
    else:
        context.configure(
            connection=config.attributes["connection"], version_table=VERSION_TABLE, target_metadata=METADATA
        )
    with context.begin_transaction():
        context.run_migrations()


if getattr(context, "config", None) is not None:  # run by Alembic (importing the module elsewhere runs nothing)
    run()
