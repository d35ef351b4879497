"""PostgreSQL pipelines: a step's statement sent in one round trip with what was deferred before it (and, for a
task that workers queue on, the task's advisory lock around it), in one implicit transaction."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["QUEUE", "RELAXED", "Pipelined", "forget_prepared", "pipeline_syncs"]

QUEUE = """SELECT CASE WHEN pg_try_advisory_lock(%(k)s) THEN true
  ELSE (SELECT false FROM pg_advisory_lock(%(k)s)) END AS free"""
"""Take a task's advisory lock in one round trip, waiting for it when held; ``free``: it was not held."""

RELAXED = "SELECT set_config('synchronous_commit', 'off', true)"
"""Sent first in a non-durable PostgreSQL step's transaction: its commit does not wait for the WAL flush."""


class Pipelined:
    """PostgreSQL: a cursor whose first statement is sent in one pipeline with the deferred ones before it (no Sync
    between them: one implicit transaction at REPEATABLE READ, committed at the Sync its first fetch sends, one round
    trip). ``committed`` is called once that transaction committed. Later statements run as usual.

    ``queue``: a task's advisory lock, taken by a statement of its own before them (a Sync between: the step's
    snapshot is taken once the lock is held) and released by one after them (another Sync: after the step's commit,
    even when the step failed), all in the same round trip: the workers that queue on a task wait on the server,
    and hold the lock for the step's execution and commit only. ``relaxed``: the transaction starts with
    :data:`RELAXED` (its commit does not wait for the WAL flush; the setting ends with it)."""

    def __init__(
        self, cur: Any, committed: Callable[[], None], queue: int | None = None, *, relaxed: bool = False
    ) -> None:
        self._cur = cur
        self._committed = committed
        self._key = queue
        conn = cur.connection
        self._context: Any = conn.pipeline()
        self._pipeline: Any = self._context.__enter__()
        self._lock: Any = None
        self._unlock: Any = None
        if queue is not None:
            from psycopg.rows import tuple_row

            self._lock = conn.cursor(row_factory=tuple_row)
            self._lock.execute(QUEUE, {"k": queue})
            self._pipeline._enqueue_sync()
        self.side = conn.cursor()
        """The cursor the deferred statements run on (their results are not read)."""
        if relaxed:
            self.side.execute(RELAXED)

    def execute(self, sql: Any, params: Any = None) -> Any:
        result = self._cur.execute(sql, params)
        self._release()
        return result

    def _release(self) -> None:
        if self._pipeline is not None and self._key is not None and self._unlock is None:
            self._pipeline._enqueue_sync()  # the step's transaction ends here: the unlock runs after its commit
            self._unlock = self._cur.connection.cursor()
            self._unlock.execute("SELECT pg_advisory_unlock(%(k)s)", {"k": self._key})

    def fetchall(self) -> Any:
        self.close()
        return self._cur.fetchall()

    def fetchone(self) -> Any:
        self.close()
        return self._cur.fetchone()

    def close(self, error: BaseException | None = None) -> bool:
        """Send the Sync and read every result (raises what the step raised: then its transaction did not commit).
        True unless the task's lock was found held by another worker. ``error``: the step raised it already; the
        pipeline is ended without raising another error over it (its "pipeline aborted")."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is None:
            return True
        locked = False  # the task's lock is still held and the aborted pipeline takes no more statements
        if self._key is not None and self._unlock is None:  # nothing was sent after the lock: release it anyway
            self._pipeline = pipeline
            try:
                self._release()
            except Exception:
                if error is None:
                    raise
                locked = True  # the step lost a race before the unlock was queued: unlock once the pipeline ended
            self._pipeline = None
        try:
            self._context.__exit__(None, None, None)
        except Exception:
            forget_prepared(self._cur.connection)
            if error is None:
                raise
            return True  # the step's own error stands: the caller raises it
        finally:
            if locked:
                self._unlock_now()
        self._committed()
        row = self._lock.fetchone() if self._lock is not None else None
        return row is None or bool(row[0])

    def _unlock_now(self) -> None:
        """Release the task's lock outside the pipeline (a session lock: left held, every worker queueing on the task
        would wait for this connection)."""
        conn = self._cur.connection
        if conn.closed:
            return  # a closed session holds no lock
        try:
            conn.execute("SELECT pg_advisory_unlock(%(k)s)", {"k": self._key})
        except Exception:
            conn.close()  # ending the session releases its locks; the next step opens a new connection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def forget_prepared(conn: Any) -> None:
    """After a pipeline that failed: psycopg may hold prepared statements that the aborted pipeline never created
    on the server ("prepared statement _pg3_N does not exist" at their next use); forget them on both sides (the
    next statement is preceded by a DEALLOCATE ALL). Without that hook, the connection is closed: the next step
    opens a new one."""
    prepared = getattr(conn, "_prepared", None)
    if prepared is not None and hasattr(prepared, "clear"):
        prepared.clear()
    elif not conn.closed:
        conn.close()


@functools.cache
def pipeline_syncs() -> bool:
    """Whether this psycopg can end an implicit transaction inside a pipeline without waiting (to queue in one)."""
    try:
        from psycopg._pipeline_base import BasePipeline
    except ImportError:  # pragma: no cover - psycopg >= 3.2 has it
        return False
    return hasattr(BasePipeline, "_enqueue_sync")
