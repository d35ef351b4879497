"""The running parts a durable engine's test needs, as context managers the engine tests and the conformance kit's
rows share: a DBOS cluster (the system database on our PostgreSQL, worker processes of tests/workers/dbos_worker.py)
and a Restate cluster (a restate-server, handler processes of tests/workers/restate_worker.py), each with the scripted
model server and the refund's counted side effects (tests/support/durable_cases.py).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agents_loopguard.store import SQLStore
from tests.support import durable_cases as cases
from tests.support.forked import ForkedPopen
from tests.support.restate_server import RestateServer, free_port
from tests.support.scripted_openai import ScriptedOpenAIServer, dynamic

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_DATABASE = "loopguard_dbos"
"""DBOS's system database: a database of its own on the test server (each cluster a schema of its own in it)."""


def _libpq(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _worker(module: str, config: dict[str, Any], **popen: Any) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", f"tests.workers.{module}", json.dumps(config)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return ForkedPopen(command, text=True, cwd=ROOT, env=env, **popen)


class DBOSCluster:
    """The scripted model server, DBOS's system database (a schema of its own, and one for the application's table
    a transaction writes) and the guard's store, shared by the worker processes."""

    def __init__(self, server: ScriptedOpenAIServer, system_url: str, schema: str, store_url: str, folder: Path):
        self.server, self.system_url, self.system_schema = server, system_url, schema
        self.store_url, self.folder = store_url, folder

    def config(self, mode: str, **fields: Any) -> dict[str, Any]:
        return {
            "mode": mode,
            "folder": str(self.folder),
            "base_url": self.server.base_url,
            "system_url": self.system_url,
            "system_schema": self.system_schema,
            "app_url": self.system_url,
            "app_schema": f"{self.system_schema}_app",
            "store_url": self.store_url,
            **fields,
        }

    def start(self, mode: str, **fields: Any) -> subprocess.Popen[str]:
        return _worker("dbos_worker", self.config(mode, **fields), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run(self, mode: str, *, killed: bool = False, timeout: float = 120, **fields: Any) -> dict[str, Any]:
        """A worker process run to its end: the workflows' results it printed (``{}`` when it was to be killed,
        which it must have been)."""
        process = self.start(mode, **fields)
        out, err = process.communicate(timeout=timeout)
        if killed:
            assert process.returncode == -9, (
                f"the worker was to be killed, it exited {process.returncode}: {err[-2000:]}"
            )
            return {}
        assert process.returncode == 0, err[-3000:]
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return {row["workflow_id"]: row for row in rows}

    def kill_rounds(self, plan: dict[str, tuple[str, str, int]], *, transactions: set[str]) -> None:
        """Start a worker for each workflow of ``plan`` (workflow id -> (body, kill point, order)), two at a time
        (2 cores), each to be killed at its point; the bodies in ``transactions`` write through a DBOS
        transaction (the datasource)."""
        pending = list(plan.items())
        while pending:
            batch, pending = pending[:2], pending[2:]
            started = [
                self.start(
                    "start",
                    workflow_id=w,
                    task_id=f"task-{w}",
                    order=o,
                    kill=p,
                    work=b,
                    executor=f"ex-{w}",
                    datasource=b in transactions,
                )
                for w, (b, p, o) in batch
            ]
            for process in started:
                _, err = process.communicate(timeout=120)
                assert process.returncode == -9, (
                    f"the worker was to be killed, it exited {process.returncode}: {err[-2000:]}"
                )

    def requests_by_order(self) -> Counter[int]:
        return cases.requests_by_order(self.server)

    def writes(self) -> Counter[str]:
        """The refunds written: lines of the log, and rows a transaction committed."""
        import psycopg

        found = cases.writes(self.folder)
        with psycopg.connect(self.system_url, autocommit=True) as conn:
            rows = conn.execute(f'SELECT refund_order FROM "{self.system_schema}_app".refunds').fetchall()
        found.update(f"refund-{order}" for (order,) in rows)
        return found


def _dbos_schemas(postgres_url: str) -> tuple[str, str]:
    """(DBOS's system database URL, a new schema for its tables), with the application's table a transaction
    writes in a schema beside it."""
    import psycopg

    with psycopg.connect(_libpq(postgres_url), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (SYSTEM_DATABASE,)).fetchone()
        if not exists:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):  # another test process made it first
                conn.execute(f'CREATE DATABASE "{SYSTEM_DATABASE}"')
    system_url = _libpq(postgres_url).rsplit("/", 1)[0] + f"/{SYSTEM_DATABASE}"
    schema = f"dbos_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(system_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}_app"')
        conn.execute(f'CREATE TABLE "{schema}_app".refunds (refund_order bigint NOT NULL)')
    return system_url, schema


def _drop_dbos_schemas(system_url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(system_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}_app" CASCADE')


_SHARED_DBOS: dict[str, tuple[str, str]] = {}


@contextlib.contextmanager
def dbos_cluster(
    postgres_url: str, store_url: str, folder: Path, *, pace: float = 0.2, shared: bool = False
) -> Iterator[DBOSCluster]:
    """A :class:`DBOSCluster` on the PostgreSQL server of ``postgres_url`` (its schemas dropped afterwards; with
    ``shared``, one pair of schemas for the whole process, DBOS's tables migrated once, dropped at exit: the kit's
    rows, whose workflows and executors are all of their own), the guard's store at ``store_url`` (its tables made
    before the workers race for them)."""
    if shared:
        if postgres_url not in _SHARED_DBOS:
            _SHARED_DBOS[postgres_url] = _dbos_schemas(postgres_url)
            atexit.register(_drop_dbos_schemas, *_SHARED_DBOS[postgres_url])
        system_url, schema = _SHARED_DBOS[postgres_url]
    else:
        system_url, schema = _dbos_schemas(postgres_url)
    SQLStore(store_url).close()
    answer = dynamic(lambda body: cases.answer(body, pace=pace))
    try:
        with ScriptedOpenAIServer([answer for _ in range(400)]) as server:
            yield DBOSCluster(server, system_url, schema, store_url, folder)
    finally:
        if not shared:
            _drop_dbos_schemas(system_url, schema)


class RestateCluster:
    """restate-server, the scripted model server, the guard's store and the handler processes, which all listen on
    one port registered once as the services' deployment."""

    def __init__(self, server: RestateServer, model: ScriptedOpenAIServer, store_url: str, folder: Path) -> None:
        self.server, self.model, self.store_url, self.folder = server, model, store_url, folder
        self.port = free_port()
        self.registered = False

    def handler(self, go: Path | None = None) -> subprocess.Popen[str]:
        """A new handler process (listening once ``go`` exists, if given: it imports meanwhile)."""
        config = {"folder": str(self.folder), "port": self.port, "base_url": self.model.base_url, "go": go and str(go)}
        with open(self.folder / "handlers.err", "a") as errors:  # the child keeps its own copy of the descriptor
            return _worker(
                "restate_worker", {**config, "store_url": self.store_url}, stdout=subprocess.DEVNULL, stderr=errors
            )

    def listening(self, process: subprocess.Popen[str]) -> subprocess.Popen[str]:
        """``process``, once it listens (the first one to listen is registered as the services' deployment)."""
        deadline = time.monotonic() + 60
        while not (self.folder / f"ready-{process.pid}").exists():
            assert process.poll() is None, f"the handler died: {(self.folder / 'handlers.err').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the handler did not listen in 60 s"
            time.sleep(0.02)
        if not self.registered:
            self.server.register(f"http://127.0.0.1:{self.port}")
            self.registered = True
        return process

    def invoke(self, **request: Any) -> str:
        key = request.pop("key", None)
        if key is not None:
            return self.server.send(f"desks/{key}", "handle", request)
        return self.server.send("refunds", "run", request)

    def requests_by_order(self) -> Counter[int]:
        return cases.requests_by_order(self.model)

    def writes(self) -> Counter[str]:
        return cases.writes(self.folder)

    def store(self) -> SQLStore:
        return SQLStore(self.store_url)

    def killed_then_retried(self, rounds: list[dict[str, Any]]) -> dict[str, Any]:
        """Each round's invocation, sent to a handler that kills itself at the round's point; its successor (which
        then serves the next round) gets the retried invocation; it is started while the round runs, and listens
        once its predecessor died. The results by tag (with the pid of the handler that served the retry)."""
        current, results = self.listening(self.handler()), {}
        successor = current
        try:
            for n, request in enumerate(rounds):
                go = self.folder / f"go-{n}"
                successor = self.handler(go)  # imports while this round runs
                invocation = self.invoke(**request)
                code = current.wait(timeout=120)
                assert code == -9, f"the handler was to be killed at {request['kill']}, it exited {code}"
                go.write_text("")
                current = self.listening(successor)
                results[request["tag"]] = {**self.server.result(invocation), "successor": current.pid}
        finally:
            stop(current)
            if successor is not current:
                stop(successor)
        return results


def stop(process: subprocess.Popen[str]) -> None:
    """A handler holds nothing to flush (its store commits every step): killed."""
    process.kill()
    process.wait(10)


@contextlib.contextmanager
def restate_cluster(server: RestateServer, store_url: str, folder: Path) -> Iterator[RestateCluster]:
    """A :class:`RestateCluster` on ``server`` (its deployment registered when its first handler listens)."""
    SQLStore(store_url).close()
    answer = dynamic(lambda body: cases.answer(body, lookups=None))
    with ScriptedOpenAIServer([answer for _ in range(300)]) as model:
        yield RestateCluster(server, model, store_url, folder)


_SHARED: list[RestateServer] = []


def shared_restate_server() -> RestateServer:
    """One restate-server for this process (started on first use, stopped at exit): the kit's rows share it."""
    if not _SHARED:
        server = RestateServer(Path(tempfile.mkdtemp(prefix="loopguard-restate-")))
        server.wait_ready()
        atexit.register(server.stop)
        _SHARED.append(server)
    return _SHARED[0]
