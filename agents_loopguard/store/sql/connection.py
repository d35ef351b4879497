"""Where the database is, how the store connects to it, and how one store step runs as one atomic step.

On SQLite each step that writes is one ``BEGIN IMMEDIATE`` transaction (the database's write lock is taken up front,
so two processes never deadlock upgrading a read lock); the file is in WAL mode with a busy timeout, so concurrent
processes wait instead of failing. On PostgreSQL a hot step is *one* statement run in autocommit at ``REPEATABLE
READ``; a step that lost a race to a concurrent one fails with a serialization error and is retried from a fresh
snapshot, so every step behaves as if the steps ran one at a time.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ...errors import StoreError
from .tables import check_schema_version, create_schema, schema_version

__all__ = [
    "DEFAULT_URL",
    "ENV_URL",
    "SQLITE_BUSY_TIMEOUT_MS",
    "SQLITE_SYNCHRONOUS",
    "Database",
    "LostRace",
    "Rollback",
    "database_url",
]

ENV_URL = "LOOPGUARD_DATABASE_URL"
"""The environment variable read when :class:`~agents_loopguard.store.sql.SQLStore` gets no URL."""
DEFAULT_URL = "sqlite:///.loopguard/loopguard.db"
"""Used when neither an argument nor ``LOOPGUARD_DATABASE_URL`` names a database: a file under the working directory."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite step waits for another process's write lock before giving up."""
_SQLITE_BUSY_HANDLER_MS = 5
"""SQLite's own busy handler sleeps up to 100 ms between attempts, leaving the lock idle under contention; it waits
only this long, and the store retries ``BEGIN IMMEDIATE`` itself (sub-millisecond, jittered) until the timeout."""
SQLITE_SYNCHRONOUS = ("WRITES", "FULL", "EXTRA", "NORMAL")
"""Accepted ``?synchronous=`` values of a SQLite URL (WAL mode; none loses a commit when a process crashes):

* WRITES (the default): the commits that protect a write or record a decision (a write's ``unknown`` reservation,
  the ledger, the stop mark, outcomes, pauses, transitions, activations) are fsynced before the step returns, so a
  write's reservation survives a power loss before the tool runs; the hot-path counters of turns and reads commit
  without waiting for the disk, and a power loss may lose the last of them (never the ledger);
* FULL / EXTRA: every commit is fsynced (counters too), at about 4x the cost of a guarded read;
* NORMAL: no commit waits for the disk; a power loss may lose the last commits, a write's reservation included."""
_PG_RETRIES = 200
"""Attempts of one PostgreSQL step that keeps losing races (serialization failure, deadlock) before giving up."""

T = TypeVar("T")


class Rollback(Exception):
    """Internal: end the transaction without its changes and answer ``value``."""

    def __init__(self, value: Any) -> None:
        super().__init__("rollback")
        self.value = value


class LostRace(Exception):
    """Internal: a statement's outcome could not be classified from its snapshot; run it again."""


def database_url(url: str | URL | None = None) -> URL:
    """The database a :class:`~agents_loopguard.store.sql.SQLStore` uses: ``url``, else ``$LOOPGUARD_DATABASE_URL``,
    else :data:`DEFAULT_URL`.

    ``postgresql://`` and ``postgres://`` mean the psycopg 3 driver; SQLite needs a file (the in-process store is
    :class:`~agents_loopguard.store.memory.MemoryStore`).

    >>> database_url("postgres://app@db.internal/agents").render_as_string()
    'postgresql+psycopg://app@db.internal/agents'
    >>> database_url("sqlite:///var/loopguard.db").database
    'var/loopguard.db'
    """
    raw = url if url is not None else (os.environ.get(ENV_URL) or DEFAULT_URL)
    try:
        parsed = make_url(raw)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot parse the database URL: {exc}") from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            raise StoreError(
                f"PostgreSQL URLs use the psycopg 3 driver: write postgresql+psycopg://... (got {parsed.drivername})"
            )
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:") or str(parsed.database).startswith("file::memory:"):
            raise StoreError(
                "an in-memory SQLite database is private to one connection: use MemoryStore in one process, "
                "or a file URL such as sqlite:///.loopguard/loopguard.db"
            )
        return parsed
    raise StoreError(
        f"unsupported database {parsed.drivername!r}: use sqlite:///path/to/file.db or postgresql+psycopg://..."
    )


def _sqlite_engine(url: URL, echo: bool) -> tuple[Engine, URL, str]:
    """The engine of a SQLite file (its folder created), the URL without ``synchronous``, and that mode."""
    if sqlite3.sqlite_version_info < (3, 35, 0):
        raise StoreError(
            f"SQLite {sqlite3.sqlite_version} has no RETURNING: agents_loopguard needs SQLite >= 3.35 "
            "(upgrade Python's sqlite3, or use PostgreSQL)"
        )
    synchronous = str(url.query.get("synchronous", "WRITES")).upper()
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise StoreError(f"synchronous={synchronous!r}: choose one of {', '.join(SQLITE_SYNCHRONOUS)} (default WRITES)")
    url = url.difference_update_query(["synchronous"])
    Path(str(url.database)).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url,
        echo=echo,
        hide_parameters=True,
        isolation_level="AUTOCOMMIT",
        paramstyle="named",
        connect_args={"timeout": _SQLITE_BUSY_HANDLER_MS / 1000, "check_same_thread": False},
    )
    base = "NORMAL" if synchronous == "WRITES" else synchronous
    event.listen(engine, "connect", functools.partial(_sqlite_on_connect, base))
    return engine, url, synchronous


class Database:
    """The store's connections (one per thread, kept open between steps) and the loop that runs a step atomically.

    ``name`` is how errors name the store (``SQLStore('url')``, password hidden).
    """

    def __init__(self, url: str | URL | None = None, *, echo: bool = False) -> None:
        self.url = database_url(url)
        self.backend = self.url.get_backend_name()
        self.postgres = self.backend == "postgresql"
        self.synchronous: str | None = None
        """SQLite's durability mode (:data:`SQLITE_SYNCHRONOUS`); None on PostgreSQL."""
        if self.postgres:
            self.engine = sa.create_engine(
                self.url, echo=echo, hide_parameters=True, isolation_level="AUTOCOMMIT", pool_pre_ping=True
            )
            event.listen(self.engine, "connect", _pg_on_connect)
        else:
            self.engine, self.url, self.synchronous = _sqlite_engine(self.url, echo)
        self.name = f"SQLStore({self.url.render_as_string(hide_password=True)!r})"
        self._begin = "BEGIN" if self.postgres else "BEGIN IMMEDIATE"
        self._fsync_some = self.synchronous == "WRITES"
        """SQLite WRITES mode: durable steps raise the connection to FULL for their own commit."""
        self._dbapi_error: type[Exception] = self.engine.dialect.loaded_dbapi.Error
        self._ready = False
        self._ready_lock = threading.Lock()
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._connections_lock = threading.Lock()

    def close(self) -> None:
        """Close the connections. The store reconnects if used again."""
        with self._connections_lock:
            held, self._connections = self._connections, []
        for conn in held:
            with contextlib.suppress(SQLAlchemyError):  # a broken connection is closed anyway
                conn.close()
        self._local = threading.local()
        self.engine.dispose()

    # --- steps ------------------------------------------------------------------------------------------------------

    def read(self, work: Callable[[Any], T]) -> T:
        """A read: its statements run as they are, without a transaction."""
        return self.run(work, transaction=False)

    def write(self, work: Callable[[Any], T], *, durable: bool = False) -> T:
        """A write step of several statements: one transaction on every backend."""
        return self.run(work, transaction=True, durable=durable)

    def step(self, work: Callable[[Any], T], *, durable: bool = False) -> T:
        """A write step that is one statement on PostgreSQL (autocommit), a transaction on SQLite.

        ``durable``: the step protects a write or records a decision (a write's ``unknown`` reservation, the ledger,
        the stop mark, an outcome, a pause, a transition): with SQLite's default ``synchronous=WRITES`` its commit is
        fsynced (which makes every earlier commit durable too); the other steps commit without waiting for the disk.
        """
        if self.postgres:
            return self.run(work, transaction=False)
        return self.run(work, transaction=True, durable=durable)

    def run(self, work: Callable[[Any], T], *, transaction: bool, durable: bool = False) -> T:
        """Run ``work(cursor)`` as one atomic step: in a transaction (``BEGIN IMMEDIATE`` on SQLite), or as the
        single statement it is (PostgreSQL autocommit at REPEATABLE READ). Retries a step that lost a race, and
        (SQLite) waits for the write lock of another process up to :data:`SQLITE_BUSY_TIMEOUT_MS`."""
        busy_until = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        attempt = 0
        while True:
            attempt += 1
            cur = self.cursor()
            began = False
            fsync = durable and transaction and self._fsync_some
            try:
                if fsync:
                    cur.execute("PRAGMA synchronous = FULL")  # this commit waits for the disk, and so all before it
                if transaction:
                    cur.execute(self._begin)
                    began = True
                result = work(cur)
                if began:
                    cur.execute("COMMIT")
                return result
            except Rollback as stop:
                if began:
                    cur.execute("ROLLBACK")
                return cast(T, stop.value)
            except LostRace:
                if began:
                    cur.execute("ROLLBACK")
            except self._dbapi_error as exc:
                self._abort(cur, began)
                if self._busy(exc, began) and time.monotonic() < busy_until:
                    time.sleep(0.001 * random.random())  # another process holds the write lock: try again soon
                    continue
                if not self._retryable(exc):
                    raise self._error(exc) from exc
            except BaseException:
                self._abort(cur, began)
                raise
            finally:
                if fsync:
                    with contextlib.suppress(self._dbapi_error):
                        cur.execute("PRAGMA synchronous = NORMAL")
            if attempt >= _PG_RETRIES:
                raise StoreError(f"{self.name}: a step kept losing races to concurrent workers ({attempt} attempts)")
            time.sleep(min(0.05, 0.0005 * attempt) * random.random())

    def _busy(self, exc: BaseException, began: bool) -> bool:
        """SQLite: the write lock (or a read of a file being checkpointed) was not free; nothing was changed."""
        return not self.postgres and not began and getattr(exc, "sqlite_errorcode", None) in (5, 6)  # BUSY, LOCKED

    def _abort(self, cur: Any, began: bool) -> None:
        if self.postgres and cur.connection.closed:
            self._drop_connection()
            return
        if began:
            try:
                cur.execute("ROLLBACK")
            except self._dbapi_error:
                self._drop_connection()

    def _retryable(self, exc: BaseException) -> bool:
        return self.postgres and getattr(exc, "sqlstate", None) in ("40001", "40P01")  # serialization, deadlock

    def _error(self, exc: BaseException) -> StoreError:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if not self.postgres and "locked" in text:
            return StoreError(
                f"{self.name}: the database stayed locked by another process for "
                f"{SQLITE_BUSY_TIMEOUT_MS / 1000:.0f} s ({text}); check for a stuck process, or use PostgreSQL "
                "for many busy workers"
            )
        return StoreError(f"{self.name}: {type(exc).__name__}: {text}")

    # --- connections --------------------------------------------------------------------------------------------------

    def cursor(self) -> Any:
        """This thread's DBAPI cursor on a connection kept open between steps (a pool checkout per step costs about
        as much as a SQLite step). A forked child never uses its parent's connection: it opens its own."""
        held: tuple[int, Connection, Any] | None = getattr(self._local, "held", None)
        pid = os.getpid()
        if held is not None and held[0] == pid and not held[1].closed and not held[1].invalidated:
            return held[2]
        if held is not None and held[0] != pid:
            self.engine.dispose(close=False)  # the parent's pooled connections stay the parent's
        try:
            conn = self.engine.connect()
        except SQLAlchemyError as exc:
            cause = getattr(exc, "orig", None) or exc
            raise StoreError(f"{self.name}: cannot connect: {str(cause).strip()}") from exc
        with self._connections_lock:
            self._connections.append(conn)
        if not self._ready:
            self._ensure_schema(conn)
        dbapi: Any = conn.connection.dbapi_connection
        if self.postgres:
            from psycopg.rows import dict_row

            cursor = dbapi.cursor(row_factory=dict_row)
        else:
            cursor = dbapi.cursor()
            cursor.row_factory = sqlite3.Row
        self._local.held = (pid, conn, cursor)
        return cursor

    def _drop_connection(self) -> None:
        held: tuple[int, Connection, Any] | None = getattr(self._local, "held", None)
        self._local.held = None
        if held is None:
            return
        with self._connections_lock:
            if held[1] in self._connections:
                self._connections.remove(held[1])
        with contextlib.suppress(Exception):  # the connection is broken anyway
            held[1].invalidate()
            held[1].close()

    def _ensure_schema(self, conn: Connection) -> None:
        with self._ready_lock:
            if self._ready:
                return
            version = schema_version(conn)
            if version is None:
                version = create_schema(conn, name=self.name, begin_exclusive=self._begin_when_free)
            check_schema_version(version, name=self.name, env_url=ENV_URL)
            self._ready = True

    def _begin_when_free(self, conn: Connection) -> None:
        """SQLite: ``BEGIN IMMEDIATE``, waiting for another process's write lock up to the busy timeout."""
        busy_until = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                conn.exec_driver_sql(self._begin)
                return
            except DBAPIError as exc:
                if exc.orig is None or not self._busy(exc.orig, False) or time.monotonic() > busy_until:
                    raise
                time.sleep(0.001 * random.random())


def _sqlite_on_connect(synchronous: str, dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_HANDLER_MS}")
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        # WAL is a property of the file, set once; switching a new file while another connection does the same
        # answers "locked" at once (no busy wait for that lock upgrade), so wait for it here
        while True:
            try:
                if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                    break
                cursor.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.002 * random.random())
        cursor.execute(f"PRAGMA synchronous = {synchronous}")  # FULL: the WAL is fsynced at every commit
    finally:
        cursor.close()


def _pg_on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.autocommit = True
    dbapi_connection.execute("SET default_transaction_isolation TO 'repeatable read'")
