"""A persistent, shared store on SQLModel tables: a SQLite file by default, PostgreSQL for many workers.

Every method is one atomic step, decided by the database and never by a read followed by a write:

- a reservation (model turn, tool execution, a write's execution together with its operation) is one conditional
  ``UPDATE ... WHERE`` (not stopped, running, under the limit) with ``RETURNING``, and the repetition count is an
  ``INSERT ... ON CONFLICT DO UPDATE ... WHERE count < :max RETURNING`` decided in the same transaction: when either
  refuses, nothing changes, and the store's refusal rules (:mod:`agents_loopguard.store.rules`) say why, in the
  same words as every other backend;
- the operation ledger relies on its primary key (``INSERT ... ON CONFLICT DO NOTHING``), so two workers can never
  reserve the same operation; the ``unknown`` reservation is committed before the tool runs;
- a pause is claimed by a conditional ``UPDATE`` on its status, so exactly one claimer wins.

On SQLite each step is one ``BEGIN IMMEDIATE`` transaction in a WAL file with ``synchronous=FULL`` for the steps
that protect a write (:data:`SQLITE_SYNCHRONOUS`). On PostgreSQL the hot steps are each *one* statement (the same
conditional pieces composed as data-modifying CTEs) at ``REPEATABLE READ``, retried from a fresh snapshot when they
lose a race, so a guarded read costs two round trips and a guarded write two; the steps that decide nothing a
crash could make unsafe commit without waiting for the WAL flush (:data:`~.connection.PG_SYNCHRONOUS`).

The package, by concern:

- :mod:`.tables`: the SQLModel tables, rows to records;
- :mod:`.schema`: what a database holds, its schema version, the tables' creation in an empty one;
- :mod:`.migrate`: ``loopguard migrate``, Alembic's migrations (``agents_loopguard/migrations``) applied to a store;
- :mod:`.connection`: the URL, the engine, connections per thread, the loop that runs a step atomically;
- :mod:`.pipeline`: PostgreSQL pipelines (a step with what was deferred before it, in one round trip);
- :mod:`.statements`: the Core statements, compiled once per dialect;
- :mod:`.sqlite`: every step as a transaction of those statements (SQLite's steps, PostgreSQL's cold ones);
- :mod:`.postgres`: PostgreSQL's hot steps as one statement each;
- :mod:`.store`: :class:`SQLStore`, whose methods build their bind values and run their backend's step.
"""

from .connection import DEFAULT_URL, ENV_URL, SQLITE_BUSY_TIMEOUT_MS, SQLITE_SYNCHRONOUS, database_url
from .schema import HEAD_REVISION, MIGRATE_COMMAND, SCHEMA_VERSION
from .store import SQLStore
from .tables import (
    METADATA,
    ActivationRow,
    MetaRow,
    OperationRow,
    PauseRow,
    RepetitionRow,
    SeenRow,
    TaskRow,
    TraceRow,
    TransitionRow,
)

__all__ = [
    "DEFAULT_URL",
    "ENV_URL",
    "HEAD_REVISION",
    "METADATA",
    "MIGRATE_COMMAND",
    "SCHEMA_VERSION",
    "SQLITE_BUSY_TIMEOUT_MS",
    "SQLITE_SYNCHRONOUS",
    "ActivationRow",
    "MetaRow",
    "OperationRow",
    "PauseRow",
    "RepetitionRow",
    "SQLStore",
    "SeenRow",
    "TaskRow",
    "TraceRow",
    "TransitionRow",
    "database_url",
]
