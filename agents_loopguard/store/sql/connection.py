"""Where the database is, how the store connects to it, and how one store step runs as one atomic step.

On SQLite each step that writes is one ``BEGIN IMMEDIATE`` transaction (the database's write lock is taken up front,
so two processes never deadlock upgrading a read lock); the file is in WAL mode with a busy timeout, so concurrent
processes wait instead of failing. On PostgreSQL a hot step is *one* statement run in autocommit at ``REPEATABLE
READ``; a step that lost a race to a concurrent one fails with a serialization error and is retried from a fresh
snapshot, so every step behaves as if the steps ran one at a time. Workers that keep racing on one task queue
instead of retrying: after a step on a task lost a race, that process's steps on the task take a per-task advisory
lock for a while (:data:`_PG_QUEUE_SECONDS`), so they run one after another; the lock only orders them, the
statements' own re-checks at REPEATABLE READ still decide (a worker that does not queue is still exact).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import random
import select
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ...values.errors import NotFoundError, StoreError
from .faults import (
    connection_lost,
    damaged_text,
    database_fault,
    folder_fault,
    one_line,
    open_fault,
    unicode_fault,
)
from .pipeline import QUEUE as _QUEUE
from .pipeline import Pipelined as _Pipelined
from .pipeline import pipeline_syncs as _pipeline_syncs
from .schema import check_schema_version, create_schema, refuse_unless_empty, survey

__all__ = [
    "DEFAULT_URL",
    "ENV_URL",
    "PG_SYNCHRONOUS",
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
PG_SYNCHRONOUS = ("WRITES", "FULL")
"""Accepted ``?synchronous=`` values of a PostgreSQL URL:

* WRITES (the default): the same steps as on SQLite wait for the server's WAL flush; the others (turn and read
  reservations, read results, trace rows, the task's creation) commit with ``synchronous_commit`` off for their own
  transaction only: visible to every worker when they return, and made durable by the next step that waits (a server
  crash may lose the last of them, never the ledger);
* FULL: every step waits for the flush, as the server's ``synchronous_commit`` says."""
_PG_RETRIES = 200
"""Attempts of one PostgreSQL step that keeps losing races (serialization failure, deadlock) before giving up."""
_PG_QUEUE_SECONDS = 1.0
"""After a step on a task lost a race (or found the task's lock held), this process's steps on that task queue on
the task's advisory lock for this long; an uncontended task is one statement per step again after it."""

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
    >>> database_url("/tmp/x.db").render_as_string()  # a path is a SQLite file
    'sqlite:////tmp/x.db'
    """
    raw = url if url is not None else (os.environ.get(ENV_URL) or DEFAULT_URL)
    if isinstance(raw, str) and "://" not in raw and ("/" in raw or raw.endswith((".db", ".sqlite3"))):
        raw = f"sqlite:///{Path(raw).expanduser()}"  # a path: the SQLite file there
    try:
        parsed = make_url(raw)
    except SQLAlchemyError as exc:
        raise StoreError(
            f"cannot parse the database URL ({exc}): give a SQLite file's path (.loopguard/loopguard.db), "
            "sqlite:///path/to/file.db, or postgresql+psycopg://user@host:5432/dbname"
        ) from None
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


def _sqlite_url(url: URL) -> tuple[URL, str]:
    """The URL without ``synchronous``, and that mode (checked)."""
    if sqlite3.sqlite_version_info < (3, 35, 0):
        raise StoreError(
            f"SQLite {sqlite3.sqlite_version} has no RETURNING: agents_loopguard needs SQLite >= 3.35 "
            "(upgrade Python's sqlite3, or use PostgreSQL)"
        )
    synchronous = str(url.query.get("synchronous", "WRITES")).upper()
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise StoreError(f"synchronous={synchronous!r}: choose one of {', '.join(SQLITE_SYNCHRONOUS)} (default WRITES)")
    return url.difference_update_query(["synchronous"]), synchronous


def _pg_url(url: URL) -> tuple[URL, str]:
    """The URL without ``synchronous`` (not a libpq parameter), and that mode (checked)."""
    synchronous = str(url.query.get("synchronous", "WRITES")).upper()
    if synchronous not in PG_SYNCHRONOUS:
        raise StoreError(
            f"synchronous={synchronous!r}: on PostgreSQL choose one of {', '.join(PG_SYNCHRONOUS)} (default WRITES)"
        )
    return url.difference_update_query(["synchronous"]), synchronous


def _sqlite_connect(path: Path, mode: str) -> sqlite3.Connection:
    """Open the SQLite file in ``mode`` (rwc: create if missing, rw, ro). A read-only WAL file whose folder cannot
    hold its shared-memory file is opened ``immutable`` (nothing can write there anyway)."""
    uri = f"file:{quote(str(path))}?mode={mode}"
    timeout = _SQLITE_BUSY_HANDLER_MS / 1000
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)
    if mode != "ro":
        return conn
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError as exc:
        conn.close()
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in (8, 14):  # READONLY, CANTOPEN: no -shm, cannot make it
            raise
        return sqlite3.connect(f"{uri}&immutable=1", uri=True, timeout=timeout, check_same_thread=False)
    return conn


def _sqlite_engine(url: URL, echo: bool, synchronous: str, *, mode: str) -> Engine:
    """The engine of a SQLite file opened in ``mode`` (see :func:`_sqlite_connect`)."""
    path = Path(str(url.database)).expanduser()
    engine = sa.create_engine(
        url,
        echo=echo,
        hide_parameters=True,
        isolation_level="AUTOCOMMIT",
        paramstyle="named",
        creator=functools.partial(_sqlite_connect, path, mode),
    )
    base = "NORMAL" if synchronous == "WRITES" else synchronous
    event.listen(engine, "connect", functools.partial(_sqlite_on_connect, base))
    return engine


def _pg_engine(url: URL, echo: bool, name: str, *, readonly: bool) -> Engine:
    try:
        engine = sa.create_engine(
            url, echo=echo, hide_parameters=True, isolation_level="AUTOCOMMIT", pool_pre_ping=True
        )
    except ImportError as exc:
        raise StoreError(
            f"{name}: PostgreSQL needs the psycopg driver, which is not installed ({exc}): "
            "pip install 'agents-loopguard[postgres]'"
        ) from None
    event.listen(engine, "connect", functools.partial(_pg_on_connect, readonly))
    return engine


class Database:
    """The store's connections (one per thread, kept open between steps) and the loop that runs a step atomically.

    ``name`` is how errors name the store (``SQLStore('url')``, password hidden); ``where`` names the database in
    them (the SQLite file's path, or the URL). ``create``: an empty or missing database may be initialized;
    ``readonly``: nothing is ever written (SQLite opens the file read-only, PostgreSQL sessions are read-only).
    """

    def __init__(
        self, url: str | URL | None = None, *, echo: bool = False, create: bool = True, readonly: bool = False
    ) -> None:
        self.url = database_url(url)
        self.backend = self.url.get_backend_name()
        self.postgres = self.backend == "postgresql"
        self.readonly = readonly
        self.create = create and not readonly
        self.synchronous: str | None = None
        """The durability mode: :data:`SQLITE_SYNCHRONOUS`, :data:`PG_SYNCHRONOUS`."""
        self.path: Path | None = None
        """The SQLite file; None on PostgreSQL."""
        if self.postgres:
            self.url, self.synchronous = _pg_url(self.url)
        else:
            self.url, self.synchronous = _sqlite_url(self.url)
            self.path = Path(str(self.url.database)).expanduser()
        shown = self.url.render_as_string(hide_password=True)
        self.name = f"SQLStore({shown!r})"
        self.where = str(self.path) if self.path is not None else shown
        if self.path is None:
            self.engine = _pg_engine(self.url, echo, self.name, readonly=readonly)
        else:
            self._prepare_file(self.path)
            mode = "ro" if readonly else ("rwc" if self.create else "rw")
            self.engine = _sqlite_engine(self.url, echo, self.synchronous or "WRITES", mode=mode)
        self._begin = "BEGIN" if self.postgres else "BEGIN IMMEDIATE"
        self._fsync_some = self.synchronous == "WRITES" and not self.postgres
        """SQLite WRITES mode: durable steps raise the connection to FULL for their own commit."""
        self._relax = self.synchronous == "WRITES" and self.postgres
        """PostgreSQL WRITES mode: the other steps commit without waiting for the WAL flush
        (:data:`.pipeline.RELAXED`)."""
        self._dbapi_error: type[Exception] = self.engine.dialect.loaded_dbapi.Error
        self._ready = False
        self._ready_lock = threading.Lock()
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._connections_lock = threading.Lock()
        self.lost_races = 0
        """Steps of this process run again because they lost a race (PostgreSQL serialization failures, deadlocks,
        unclassifiable outcomes): what the contention benchmark counts."""
        self._deferred: tuple[int, list[Callable[[Any], None]]] = (os.getpid(), [])
        """Statements of this process that need no transaction of their own (trace rows), run with the next write
        step (see :meth:`defer`)."""
        self._deferred_lock = threading.Lock()
        self._contended: dict[int, float] = {}
        """PostgreSQL: advisory lock key of a task -> until when this process's steps on it queue on its lock."""

    def _prepare_file(self, path: Path) -> None:
        """A store that may create gets the file's folder; one that may not needs the file (nothing is created)."""
        if path.is_dir():
            raise StoreError(f"{self.name}: {path} is a folder, not a database file")
        if not self.create:
            if not path.is_file():
                raise NotFoundError(f"no loopguard store at {path}")
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise folder_fault(self.name, path.parent, exc) from None

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

    def defer(self, work: Callable[[Any], None]) -> None:
        """Run ``work(cursor)`` with the next write step, before that step's own statements, instead of in a
        transaction of its own: in that step's transaction (SQLite, and PostgreSQL's multi-statement steps), or
        pipelined with a PostgreSQL single-statement step into one transaction and one round trip. It commits with
        that step (fsynced if that step is durable; rolled back and kept for the next one if that step is refused).
        For rows that record no decision (trace rows); reads of this store run it first (:meth:`flush`), so this
        process sees it at once, other processes from the next step on."""
        self._writable()
        with self._deferred_lock:
            pid, pending = self._deferred
            if pid != os.getpid():  # a forked child: the parent's pending work is the parent's
                self._deferred = pid, pending = os.getpid(), []
            pending.append(work)

    def flush(self) -> None:
        """Run the deferred work now, in a transaction of its own (nothing to do when none is pending)."""
        if self._pending():
            self.run(lambda cur: None, transaction=True)

    def _pending(self) -> list[Callable[[Any], None]]:
        pid, pending = self._deferred
        return pending if pid == os.getpid() else []

    def _run_deferred(self, cur: Any) -> int:
        """Run the pending deferred work in this transaction; how many (removed once the transaction commits)."""
        if not self._deferred[1]:
            return 0
        with self._deferred_lock:
            batch = list(self._pending())
        for work in batch:
            work(cur)
        return len(batch)

    def _work(
        self, cur: Any, work: Callable[[Any], T], *, began: bool, carry: bool, queue: int | None, relaxed: bool
    ) -> tuple[T, int]:
        """``work(cur)`` with the deferred statements: first in the step's own transaction (then how many ran, done
        once it commits), or (``carry``: a PostgreSQL single-statement write step) pipelined with the step's
        statement into one implicit transaction, one round trip; ``queue``: the task lock to take first and release
        after, in the same pipeline (see :class:`.pipeline.Pipelined`); ``relaxed``: the pipeline's transaction
        commits without waiting for the WAL flush."""
        if began:
            deferred = self._run_deferred(cur)
            return work(cur), deferred
        if carry and (queue is not None or relaxed or self._pending()):
            with self._deferred_lock:
                batch = list(self._pending())
            pipelined = _Pipelined(cur, functools.partial(self._deferred_done, len(batch)), queue, relaxed=relaxed)
            try:
                for deferred_work in batch:
                    deferred_work(pipelined.side)
                result = work(pipelined)
            except BaseException as exc:
                pipelined.close(exc)  # ends the pipeline without hiding what the step raised (a lost race)
                raise
            if not pipelined.close() and queue is not None:
                self._contended[queue] = time.monotonic() + _PG_QUEUE_SECONDS  # the lock was held: keep queueing
            return result, 0
        return work(cur), 0

    def _deferred_done(self, count: int) -> None:
        if not count:
            return
        with self._deferred_lock:
            del self._pending()[:count]

    def read(self, work: Callable[[Any], T]) -> T:
        """A read: its statements run as they are, without a transaction."""
        return self.run(work, transaction=False)

    def write(self, work: Callable[[Any], T], *, durable: bool = False, task: str | None = None) -> T:
        """A write step of several statements: one transaction on every backend (``task``: see :meth:`step`)."""
        self._writable()
        return self.run(work, transaction=True, durable=durable, task=task)

    def step(self, work: Callable[[Any], T], *, durable: bool = False, task: str | None = None) -> T:
        """A write step that is one statement on PostgreSQL (autocommit), a transaction on SQLite.

        ``durable``: the step protects a write or records a decision (a write's ``unknown`` reservation, the ledger,
        the stop mark, an outcome, a pause, a transition): with SQLite's default ``synchronous=WRITES`` its commit is
        fsynced (which makes every earlier commit durable too); the other steps commit without waiting for the disk.
        On PostgreSQL (``synchronous=WRITES``) a step that is not durable commits without waiting for the server's WAL
        flush; the next durable step's flush makes it durable too.
        ``task``: the task the step changes (PostgreSQL: its steps queue on the task's lock after a lost race).
        """
        self._writable()
        if self.postgres:
            return self.run(work, transaction=False, durable=durable, task=task)
        return self.run(work, transaction=True, durable=durable)

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"{self.name} is open read-only: open it without readonly=True to change it")

    def run(self, work: Callable[[Any], T], *, transaction: bool, durable: bool = False, task: str | None = None) -> T:
        """Run ``work(cursor)`` as one atomic step: in a transaction (``BEGIN IMMEDIATE`` on SQLite), or as the
        single statement it is (PostgreSQL autocommit at REPEATABLE READ). Retries a step that lost a race (on
        PostgreSQL queued on ``task``'s advisory lock, see :data:`_PG_QUEUE_SECONDS`), and (SQLite) waits for the
        write lock of another process up to :data:`SQLITE_BUSY_TIMEOUT_MS`. A database fault is a
        :class:`~agents_loopguard.StoreError` (the step rolled back)."""
        try:
            return self._steps(work, transaction=transaction, durable=durable, task=task)
        except UnicodeError as exc:  # a damaged file's undecodable error text, or a lone surrogate sent (rolled back)
            raise unicode_fault(self.name, self.where, exc) from None

    def _steps(self, work: Callable[[Any], T], *, transaction: bool, durable: bool, task: str | None) -> T:
        busy_until = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        key = _lock_key(task) if self.postgres and task is not None else None
        attempt = 0
        while True:
            attempt += 1
            cur = self.cursor()
            began = locked = False
            fsync = durable and transaction and self._fsync_some
            try:
                queue = key if key is not None and self._contended.get(key, 0.0) > time.monotonic() else None
                carry = task is not None and not transaction
                relaxed = carry and self._relax and not durable
                if queue is not None and not (carry and _pipeline_syncs()):
                    locked, queue = self._queue(cur, queue), None
                if fsync:
                    cur.execute("PRAGMA synchronous = FULL")  # this commit waits for the disk, and so all before it
                if transaction:
                    cur.execute(self._begin)
                    began = True
                result, deferred = self._work(cur, work, began=began, carry=carry, queue=queue, relaxed=relaxed)
                if began:
                    cur.execute("COMMIT")
                    self._deferred_done(deferred)
                return result
            except Rollback as stop:
                self._abort(cur, began)
                return cast(T, stop.value)
            except LostRace:
                self._abort(cur, began)
            except self._dbapi_error as exc:
                lost = self._abort(cur, began)
                if self._busy(exc, began) and time.monotonic() < busy_until:
                    time.sleep(0.001 * random.random())  # another process holds the write lock: try again soon
                    continue
                if lost:
                    raise connection_lost(self.name, exc) from exc
                if not self._retryable(exc):
                    raise self._error(exc) from exc
            except BaseException:
                self._abort(cur, began)
                raise
            finally:
                if fsync:
                    with contextlib.suppress(self._dbapi_error):
                        cur.execute("PRAGMA synchronous = NORMAL")
                if locked:
                    self._unqueue(cur, key)
            self._lost_race(attempt, key)

    def _lost_race(self, attempt: int, key: int | None) -> None:
        """Before the step runs again: queue on the task from now on (the retry waits for the task's lock instead of
        sleeping at random), or back off a little more at each attempt."""
        self.lost_races += 1
        if attempt >= _PG_RETRIES:
            raise StoreError(f"{self.name}: a step kept losing races to concurrent workers ({attempt} attempts)")
        if key is not None:
            self._contended[key] = time.monotonic() + _PG_QUEUE_SECONDS
            if attempt <= 2:
                return
        time.sleep(min(0.05, 0.0005 * attempt) * random.random())

    def _queue(self, cur: Any, key: int) -> bool:
        """Take ``key``'s advisory lock (a session lock, outside the step's own transaction, so the step's snapshot
        is taken after the lock is held); a lock found held keeps this process queueing on the task."""
        cur.execute(_QUEUE, {"k": key})
        row = cur.fetchone()
        if not (row and row["free"]):
            self._contended[key] = time.monotonic() + _PG_QUEUE_SECONDS
        return True

    def _unqueue(self, cur: Any, key: int | None) -> None:
        if cur.connection.closed:
            return  # the session, and its lock, are gone
        with contextlib.suppress(self._dbapi_error):
            cur.execute("SELECT pg_advisory_unlock(%(k)s)", {"k": key})
            cur.fetchall()

    def _busy(self, exc: BaseException, began: bool) -> bool:
        """SQLite: the write lock (or a read of a file being checkpointed) was not free; nothing was changed."""
        code = getattr(exc, "sqlite_errorcode", None)  # an extended code: BUSY_RECOVERY, BUSY_SNAPSHOT... are BUSY
        return not self.postgres and not began and code is not None and code & 0xFF in (5, 6)  # BUSY, LOCKED

    def _abort(self, cur: Any, began: bool) -> bool:
        """End a failed step without its changes; True when its (PostgreSQL) connection was lost under it."""
        if self.postgres and cur.connection.closed:
            self._drop_connection()
            return True
        if began:
            try:
                cur.execute("ROLLBACK")
            except self._dbapi_error:  # SQLite rolled back already (a full disk), or the connection is unusable
                self._drop_connection()
        return False

    def _retryable(self, exc: BaseException) -> bool:
        return self.postgres and getattr(exc, "sqlstate", None) in ("40001", "40P01")  # serialization, deadlock

    def _error(self, exc: BaseException) -> StoreError:
        if not self.postgres and getattr(exc, "sqlite_errorcode", None) in (5, 6):
            return StoreError(
                f"{self.name}: the database stayed locked by another process for "
                f"{SQLITE_BUSY_TIMEOUT_MS / 1000:.0f} s ({one_line(str(exc))}); check for a stuck process, or use "
                "PostgreSQL for many busy workers"
            )
        return database_fault(self.name, self.where, exc)

    # --- connections --------------------------------------------------------------------------------------------------

    def cursor(self) -> Any:
        """This thread's DBAPI cursor on a connection kept open between steps (a pool checkout per step costs about
        as much as a SQLite step). A forked child never uses its parent's connection: it opens its own. A
        PostgreSQL connection that the server closed while it was idle (a killed backend, a restart) is replaced
        before the step is sent: nothing of the step was sent on it."""
        held: tuple[int, Connection, Any, Any] | None = getattr(self._local, "held", None)
        pid = os.getpid()
        if held is not None and held[0] == pid and not held[1].closed and not held[1].invalidated:
            if held[3] is None or not held[3].poll(0):
                return held[2]
            self._drop_connection()  # the server spoke while the connection was idle: it is closing it
            held = None
        if held is not None and held[0] != pid:
            self.engine.dispose(close=False)  # the parent's pooled connections stay the parent's
        try:
            conn = self.engine.connect()
        except (SQLAlchemyError, OSError, UnicodeDecodeError) as exc:
            raise open_fault(self.name, self.where, exc, path=self.path) from exc
        try:
            if not self._ready:
                self._ensure_schema(conn)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                conn.invalidate()
                conn.close()
            if isinstance(exc, UnicodeDecodeError):
                raise damaged_text(self.name, self.where, exc) from exc
            if isinstance(exc, (SQLAlchemyError, self._dbapi_error)):
                raise self._error(getattr(exc, "orig", None) or exc) from exc
            raise
        with self._connections_lock:
            self._connections.append(conn)
        dbapi: Any = conn.connection.dbapi_connection
        watch = None
        if self.postgres:
            from psycopg.rows import dict_row

            cursor = dbapi.cursor(row_factory=dict_row)
            watch = select.poll()
            watch.register(dbapi.pgconn.socket, select.POLLIN)
        else:
            cursor = dbapi.cursor()
            cursor.row_factory = sqlite3.Row
        self._local.held = (pid, conn, cursor, watch)
        self._local.keeper = _ThreadEnd(pid, conn, self._release)  # the thread's end gives the connection back
        return cursor

    def _release(self, conn: Connection) -> None:
        """A thread that held ``conn`` ended (or took another one): back to the pool (threads made per call)."""
        with self._connections_lock:
            if conn not in self._connections:
                return
            self._connections.remove(conn)
        with contextlib.suppress(Exception):
            conn.close()

    def _drop_connection(self) -> None:
        held: tuple[int, Connection, Any, Any] | None = getattr(self._local, "held", None)
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
        """Check what the database holds before its first use: a loopguard store of this version is used; an empty
        database is initialized by a store that may create; anything else is refused, and nothing is changed."""
        with self._ready_lock:
            if self._ready:
                return
            found = self._when_free(lambda: survey(conn))
            version = found.version
            if version is None:
                refuse_unless_empty(found, name=self.name, where=self.where, create=self.create)
                version = create_schema(conn, name=self.name, where=self.where, begin_exclusive=self._begin_when_free)
            check_schema_version(version, name=self.name, env_url=ENV_URL)
            if not self.postgres and not self.readonly:
                _wal(conn.connection.dbapi_connection)
            self._ready = True

    def _when_free(self, work: Callable[[], T]) -> T:
        """SQLite: ``work()``, waiting for another process's lock up to the busy timeout."""
        busy_until = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                return work()
            except DBAPIError as exc:
                if exc.orig is None or not self._busy(exc.orig, False) or time.monotonic() > busy_until:
                    raise
                time.sleep(0.001 * random.random())

    def _begin_when_free(self, conn: Connection) -> None:
        """SQLite: ``BEGIN IMMEDIATE``, waiting for another process's write lock up to the busy timeout."""
        self._when_free(lambda: conn.exec_driver_sql(self._begin))


def _lock_key(task: str) -> int:
    """A task's PostgreSQL advisory lock key (a signed 64-bit hash; a collision only makes two tasks queue)."""
    return int.from_bytes(
        hashlib.blake2b(f"loopguard:{task}".encode(errors="surrogatepass"), digest_size=8).digest(), "big", signed=True
    )


def _wal(dbapi_connection: Any) -> None:
    """Put a loopguard SQLite file in WAL mode (a property of the file: set once, when the store is created)."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    # switching a file while another connection does the same answers "locked" at once (no busy wait for that lock
    # upgrade), so wait for it here
    while True:
        try:
            if dbapi_connection.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            dbapi_connection.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.002 * random.random())


def _sqlite_on_connect(synchronous: str, dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_HANDLER_MS}")
        # FULL: the WAL is fsynced at every commit. While another connection switches a new file to WAL, this
        # answers "locked" at once (the busy handler does not wait for that), so wait for it here.
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                cursor.execute(f"PRAGMA synchronous = {synchronous}")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.002 * random.random())
    finally:
        cursor.close()


def _pg_on_connect(readonly: bool, dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.autocommit = True
    dbapi_connection.execute("SET default_transaction_isolation TO 'repeatable read'")
    if readonly:
        dbapi_connection.execute("SET default_transaction_read_only TO on")


class _ThreadEnd:
    """Beside a thread's connection in its local storage: when the thread ends, the connection is released (by the
    process that opened it only)."""

    __slots__ = ("conn", "pid", "release")

    def __init__(self, pid: int, conn: Connection, release: Callable[[Connection], None]) -> None:
        self.pid, self.conn, self.release = pid, conn, release

    def __del__(self) -> None:
        if os.getpid() == self.pid:
            with contextlib.suppress(Exception):
                self.release(self.conn)
