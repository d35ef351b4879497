"""The store's schema migrations (Alembic), shipped with the package and applied by ``loopguard migrate``.

Revision ``000N`` brings a store to schema version N (:data:`agents_loopguard.store.sql.SCHEMA_VERSION`) and records
N in ``loopguard_meta``; ``0001`` is the baseline, the schema of the first release. Migrations only go forward:
to go back, restore the backup taken before migrating. Run them through
:func:`agents_loopguard.store.sql.migrate.migrate` (or the command), never with a bare ``alembic`` command line: the
store's own version table is ``loopguard_alembic_version``, so an application's Alembic history is left alone.
"""
