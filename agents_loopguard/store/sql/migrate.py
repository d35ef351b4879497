"""``loopguard migrate``: bring a store of an older schema version to this one, with Alembic.

The migrations live in the package (``agents_loopguard/migrations``); revision ``000N`` brings a store to schema
version N. A store's version is the one row of ``loopguard_meta`` (what every store compares when it opens); a
store written before the migrations existed has no Alembic version table yet, and is stamped with the revision of
its version first. The whole migration is one transaction (SQLite and PostgreSQL both run DDL in transactions), under
the database's write lock (SQLite) or the store's advisory lock (PostgreSQL): it applies whole or not at all.

Stop the store's workers first: a worker that opened the store before keeps running the statements of its own
version. ``dry_run`` prints the SQL (Alembic's offline mode) and changes nothing.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from ...values.errors import StoreError
from .connection import Database
from .faults import database_fault, open_fault
from .schema import HEAD_REVISION, SCHEMA_VERSION, VERSION_TABLE, Survey, refuse_unless_empty, revision_of, survey

__all__ = ["Migration", "migrate"]


@dataclass(frozen=True)
class Migration:
    """What :func:`migrate` did, or would do."""

    store: str
    """The store, as errors name it (password hidden)."""
    from_version: int
    to_version: int
    revisions: tuple[str, ...]
    """The revisions applied (or, for a dry run, to apply), oldest first; empty when the store was current."""
    dry_run: bool = False
    sql: str = ""
    """For a dry run: the SQL that would run."""


def migrate(url: str | URL | None = None, *, dry_run: bool = False) -> Migration:
    """Bring the store at ``url`` (else ``$LOOPGUARD_DATABASE_URL``, else the default file) to :data:`SCHEMA_VERSION`.

    Raises :class:`~agents_loopguard.NotFoundError` when there is no store there, and
    :class:`~agents_loopguard.StoreError` for a database that is not a loopguard store or was written by a
    newer agents_loopguard.

    >>> import tempfile
    >>> from agents_loopguard.store import SQLStore
    >>> url = f"sqlite:///{tempfile.mkdtemp()}/lg.db"
    >>> SQLStore(url).tasks()
    []
    >>> done = migrate(url)
    >>> done.from_version == done.to_version, done.revisions
    (True, ())
    """
    db = Database(url, create=False, readonly=dry_run)
    try:
        with _connected(db) as conn:
            if dry_run:
                return _dry_run(db, conn)
            return _upgrade(db, conn)
    except (SQLAlchemyError, db._dbapi_error) as exc:
        raise database_fault(db.name, db.where, getattr(exc, "orig", None) or exc) from exc
    finally:
        db.close()


@contextlib.contextmanager
def _connected(db: Database) -> Iterator[Connection]:
    try:
        conn = db.engine.connect()
    except SQLAlchemyError as exc:
        raise open_fault(db.name, db.where, exc, path=db.path) from exc
    with conn:
        yield conn


def _version(db: Database, found: Survey) -> int:
    """The store's schema version, if it can be migrated by this agents_loopguard."""
    refuse_unless_empty(found, name=db.name, where=db.where, create=False)
    assert found.version is not None
    if not found.version.isdigit() or int(found.version) > SCHEMA_VERSION:
        raise StoreError(
            f"{db.name} holds agents_loopguard schema version {found.version}, newer than this agents_loopguard's "
            f"{SCHEMA_VERSION}: upgrade agents_loopguard; nothing was changed"
        )
    return int(found.version)


def _stamped(db: Database, conn: Connection, found: Survey, version: int) -> bool:
    """True when the store has its Alembic version table, at the revision of its version (else it is refused)."""
    if VERSION_TABLE not in found.tables:
        return False
    rows = [str(r) for (r,) in conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}")]
    if rows != [revision_of(version)]:
        raise StoreError(
            f"{db.name}: loopguard_meta says schema version {version} but {VERSION_TABLE} says {rows}: the store "
            "was changed by hand; nothing was changed"
        )
    return True


def _config(**attributes: Any) -> Any:
    from alembic.config import Config

    config = Config(output_buffer=attributes.pop("output", None))
    config.set_main_option("script_location", "agents_loopguard:migrations")
    config.attributes.update(attributes)
    return config


def _revisions(version: int) -> tuple[str, ...]:
    return tuple(revision_of(n) for n in range(version + 1, SCHEMA_VERSION + 1))


def _dry_run(db: Database, conn: Connection) -> Migration:
    from alembic import command

    found = survey(conn)
    version = _version(db, found)
    revisions = _revisions(version)
    if not revisions:
        return Migration(db.name, version, version, (), dry_run=True)
    out = io.StringIO()
    config = _config(output=out, dialect=conn.dialect.name)
    if not _stamped(db, conn, found, version):
        command.stamp(config, revision_of(version), sql=True)
    command.upgrade(config, f"{revision_of(version)}:{HEAD_REVISION}", sql=True)
    return Migration(db.name, version, SCHEMA_VERSION, revisions, dry_run=True, sql=out.getvalue())


def _upgrade(db: Database, conn: Connection) -> Migration:
    from alembic import command

    if db.postgres:
        conn.exec_driver_sql("BEGIN")
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7295810394)")  # the lock the stores create tables under
    else:
        db._begin_when_free(conn)
    try:
        found = survey(conn)
        version = _version(db, found)
        revisions = _revisions(version)
        if revisions:
            config = _config(connection=conn)
            if not _stamped(db, conn, found, version):
                command.stamp(config, revision_of(version))
            command.upgrade(config, HEAD_REVISION)
            after = survey(conn).version
            if after != str(SCHEMA_VERSION):  # pragma: no cover - a revision that forgot to record its version
                raise StoreError(f"{db.name}: the migrations ended at version {after}, not {SCHEMA_VERSION}")
        conn.exec_driver_sql("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            conn.exec_driver_sql("ROLLBACK")
        raise
    return Migration(db.name, version, SCHEMA_VERSION, revisions)
