"""What a database holds before the store uses it, the schema version it carries, and the tables' creation.

A store decides its schema cheaply: one row, ``schema_version`` in ``loopguard_meta``, compared with
:data:`SCHEMA_VERSION` (Alembic is imported only by ``loopguard migrate``). Only an *empty* database (for
PostgreSQL: an empty schema, the first of the connection's ``search_path``) is initialized, and only by a store that
may create; a database with other tables and no ``loopguard_meta`` is refused and left as it was.

The schema's versions are the Alembic revisions under ``agents_loopguard/migrations/versions``: revision ``000N``
brings a store to version N and records N in ``loopguard_meta``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite as lite
from sqlalchemy.exc import DBAPIError

from ...values.errors import NotFoundError, StoreError
from .tables import METADATA, meta
from .tallies import create_triggers

__all__ = [
    "HEAD_REVISION",
    "MIGRATE_COMMAND",
    "SCHEMA_VERSION",
    "VERSION_TABLE",
    "Survey",
    "check_schema_version",
    "create_schema",
    "refuse_unless_empty",
    "revision_of",
    "survey",
]

SCHEMA_VERSION = 7
"""The version of the tables in :mod:`.tables`; a database that carries another one is refused with a message."""
MIGRATE_COMMAND = "loopguard migrate"
"""The command that brings a store of an older version to :data:`SCHEMA_VERSION`."""
VERSION_TABLE = "loopguard_alembic_version"
"""Alembic's version table in a migrated store (its own name: an application's ``alembic_version`` is left alone)."""


def revision_of(version: int | str) -> str:
    """The Alembic revision id of a schema version.

    >>> revision_of(1), revision_of("12")
    ('0001', '0012')
    """
    return f"{int(version):04d}"


HEAD_REVISION = revision_of(SCHEMA_VERSION)
"""The Alembic revision of :data:`SCHEMA_VERSION` (the head of the migrations)."""


@dataclass(frozen=True)
class Survey:
    """What a database holds, read before the store uses it (nothing is changed by reading it)."""

    version: str | None
    """``schema_version`` from ``loopguard_meta``; None when the database has no such table."""
    tables: tuple[str, ...]
    """The tables of the database (SQLite) or of the connection's current schema (PostgreSQL)."""

    @property
    def empty(self) -> bool:
        """True when the database holds no table at all."""
        return not self.tables


_ELSEWHERE = (
    "SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE current_schema() = 'public' "
    "AND table_schema NOT IN ('public', 'information_schema') AND left(table_schema, 3) <> 'pg_' "
    "ORDER BY 1 LIMIT 6"
)
"""PostgreSQL: the tables of the database's other schemas, read when the store would use ``public``."""


def survey(conn: Connection) -> Survey:
    """The tables the database holds and the schema version it carries (a few reads, no change).

    On PostgreSQL, a store that would live in ``public`` (no schema of its own on the ``search_path``) counts the
    tables of the database's other schemas too: a database whose tables live in ``app`` is an application's
    database, refused like one whose tables are in ``public``, never stamped (a store in a schema of its own is
    never refused for what other schemas hold)."""
    if conn.dialect.name == "postgresql":
        listing = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    else:
        listing = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    tables = tuple(sorted(str(name) for (name,) in conn.exec_driver_sql(listing)))
    if not tables and conn.dialect.name == "postgresql":
        tables = tuple(str(name) for (name,) in conn.exec_driver_sql(_ELSEWHERE))
    if meta.name not in tables:
        return Survey(None, tables)
    value = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
    return Survey(None if value is None else str(value), tables)


def refuse_unless_empty(found: Survey, *, name: str, where: str, create: bool) -> None:
    """Refuse a database that is not a loopguard store: one with other tables (never stamped), or, for a store that
    may not create, an empty one. Nothing is changed either way."""
    if found.version is not None:
        return
    if not found.empty:
        shown = ", ".join(found.tables[:5]) + (", ..." if len(found.tables) > 5 else "")
        raise StoreError(
            f"{name}: {where} is not a loopguard store: it holds other tables ({shown}) and no loopguard_meta; "
            "nothing was changed. Point the store at a loopguard store, an empty database, or (PostgreSQL) a schema "
            "of its own (CREATE SCHEMA loopguard, then ?options=-csearch_path%3Dloopguard in the URL)"
        )
    if not create:
        raise NotFoundError(f"no loopguard store at {where}")


def create_schema(conn: Connection, *, name: str, where: str, begin_exclusive: Callable[[Connection], None]) -> str:
    """Create the tables in an empty database and record :data:`SCHEMA_VERSION`; return the version it carries
    after (another worker's, if one created them first). A database that holds other tables is refused unchanged.

    Several workers may do this at once: on PostgreSQL one creates under an advisory lock while the others wait,
    then see the tables; on SQLite ``begin_exclusive`` takes the write lock (waiting for another process).
    """
    postgres = conn.dialect.name == "postgresql"
    try:
        if postgres:
            conn.exec_driver_sql("BEGIN ISOLATION LEVEL READ COMMITTED")  # each statement sees the latest
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7295810394)")
        else:
            begin_exclusive(conn)
        found = survey(conn)
        if found.version is None:
            refuse_unless_empty(found, name=name, where=where, create=True)
            METADATA.create_all(conn, checkfirst=True)
            create_triggers(conn)
            insert = pg.insert if postgres else lite.insert
            version = insert(meta).values(key="schema_version", value=str(SCHEMA_VERSION))
            conn.execute(version.on_conflict_do_nothing(index_elements=["key"]))
            found = survey(conn)
        conn.exec_driver_sql("COMMIT")
    except BaseException:
        with contextlib.suppress(DBAPIError):
            conn.exec_driver_sql("ROLLBACK")
        raise
    assert found.version is not None
    return found.version


def check_schema_version(version: str, *, name: str, env_url: str) -> None:
    """Refuse a database written with another schema version, saying what to do: an older one is migrated
    (``loopguard migrate``), a newer one needs a newer agents_loopguard."""
    if version == str(SCHEMA_VERSION):
        return
    if version.isdigit() and int(version) < SCHEMA_VERSION:
        raise StoreError(
            f"{name} holds agents_loopguard schema version {version}, but this agents_loopguard uses version "
            f"{SCHEMA_VERSION}: stop its workers and run `{MIGRATE_COMMAND}` with --db (or ${env_url}) naming it "
            f"(`{MIGRATE_COMMAND} --dry-run` prints the SQL first)"
        )
    raise StoreError(
        f"{name} holds agents_loopguard schema version {version}, but this agents_loopguard uses "
        f"version {SCHEMA_VERSION}: upgrade agents_loopguard to the version that wrote it. Or point the store (or "
        f"${env_url}) at a new database, or, once no task or operation in it is unfinished, drop its loopguard_* "
        "tables to let them be recreated"
    )
