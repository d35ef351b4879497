"""What a guarded call costs on the persistent stores, next to the raw floor of the same database.

Measured side by side in one run, interleaved (every round runs each case once, in a shuffled order):

- a guarded read and a guarded write (``Guard.authorize`` + ``Guard.settle``) on SQLStore over a SQLite file
  (``synchronous=WRITES``, the default, ``FULL`` and ``NORMAL`` for comparison) and over PostgreSQL;
- the raw floor on the same database: one raw ``sqlite3`` INSERT + commit with the same synchronous setting, and one
  psycopg autocommit INSERT.

It also counts, for one guarded call, the statements the store sends (sqlite3's trace callback; on PostgreSQL libpq's
protocol trace) and, on PostgreSQL, the client/server round trips (one per ``Sync``/``Query`` message).

Run::

    LOOPGUARD_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        .venv/bin/python benchmarks/bench_store.py [--rounds 15] [--batch 40]

Without a PostgreSQL URL only the SQLite rows are printed. Goals: a guarded read costs at most 2 round trips and a
guarded write at most 3; a guarded SQLite read stays within 3x the raw floor.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paired import freeze_heap, pg_schema

from agents_loopguard import Budget, Guard
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.calls import Ticket
from tests.support.store_trace import sent

BUDGET = Budget(model_turns=10**9, tool_executions=10**9)


def verify_read(call: Any, result: Any) -> dict[str, Any]:
    return {"revision": result["n"], "done": False, "effect": "none"}


def verify_write(call: Any, result: Any) -> dict[str, Any]:
    return {"revision": result["n"], "done": False, "effect": "committed"}


class GuardedCalls:
    """Guarded reads and writes on one task of ``store``; each call has new arguments (no repetition refusals)."""

    def __init__(self, store: SQLStore) -> None:
        self.store = store
        self.guard = Guard(budget=BUDGET, store=store, task_id=f"bench-{uuid.uuid4().hex[:8]}")
        self.n = 0

    def read(self) -> None:
        self.n += 1
        ticket = self.guard.authorize({"tool": "search", "kind": "read", "args": {"q": f"order {self.n}"}})
        assert isinstance(ticket, Ticket), ticket
        verdict = self.guard.settle(ticket, {"status": "ok", "n": self.n, "hits": [1, 2, 3]}, verify_read)
        assert verdict is None, verdict

    def write(self) -> None:
        self.n += 1
        op = f"{self.guard.task_id}-confirm-{self.n}"
        call = {"tool": "confirm", "kind": "write", "operation_id": op, "args": {"order": self.n, "amount": 5}}
        ticket = self.guard.authorize(call)
        assert isinstance(ticket, Ticket) and not ticket.replay, ticket
        verdict = self.guard.settle(ticket, {"status": "ok", "n": self.n, "receipt": f"r-{self.n}"}, verify_write)
        assert verdict is None, verdict


def sqlite_floor(path: Path, synchronous: str) -> Callable[[], None]:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, v TEXT)")
    conn.commit()

    def insert() -> None:
        conn.execute("INSERT INTO bench_floor (v) VALUES (?)", ("x",))
        conn.commit()

    return insert


def pg_floor(libpq: str) -> Callable[[], None]:
    import psycopg

    conn = psycopg.connect(libpq, autocommit=True)
    conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, v text)")

    def insert() -> None:
        conn.execute("INSERT INTO bench_floor (v) VALUES (%s)", ("x",))

    return insert


def count_exchanges(store: SQLStore, call: Callable[[], None]) -> tuple[int, int | None]:
    """Statements the store sends during ``call``, and (PostgreSQL) client/server round trips.

    SQLite: sqlite3's trace callback sees every statement (BEGIN IMMEDIATE and COMMIT too); it runs in-process, so
    there are no round trips. PostgreSQL: libpq's protocol trace of the store's connection; a round trip is one
    ``Sync`` (extended protocol) or ``Query`` (simple protocol) message, a statement one ``Execute`` or ``Query``.
    """
    messages = sent(store, call)
    if store.backend != "postgresql":
        return len(messages), None
    statements = sum(1 for kind in messages if kind in ("Execute", "Query"))
    return statements, sum(1 for kind in messages if kind in ("Sync", "Query"))


def measure(cases: dict[str, Callable[[], None]], rounds: int, batch: int) -> dict[str, float]:
    """Median microseconds per call of each case, the cases interleaved round by round."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():  # warm up: connections, prepared statements, caches
        for _ in range(max(5, batch // 4)):
            fn()
    freeze_heap()
    for _ in range(rounds):
        order = list(cases)
        random.shuffle(order)
        for name in order:
            fn = cases[name]
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            samples[name].append((time.perf_counter() - start) / batch * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=40)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="lg-bench-"))
    cases: dict[str, Callable[[], None]] = {}
    counts: dict[str, tuple[int, int | None]] = {}
    floors: dict[str, str] = {}
    stores: list[SQLStore] = []
    with pg_schema() as pg:
        backends: list[tuple[str, str, str]] = []
        for sync in ("WRITES", "FULL", "NORMAL"):
            db = tmp / f"store-{sync.lower()}.db"
            floor_sync = "NORMAL" if sync == "WRITES" else sync  # WRITES: a read's commits are NORMAL, so is its floor
            backends.append((f"sqlite {sync}", f"sqlite:///{db}?synchronous={sync}", f"raw sqlite3 {floor_sync}"))
            if f"raw sqlite3 {floor_sync}" not in cases:
                cases[f"raw sqlite3 {floor_sync}"] = sqlite_floor(tmp / f"floor-{floor_sync.lower()}.db", floor_sync)
        if pg is not None:
            backends.append(("postgresql", pg[0], "raw psycopg"))
        for label, url, floor in backends:
            store = SQLStore(url)
            stores.append(store)
            calls = GuardedCalls(store)
            calls.read()  # creates the schema and warms the connection
            for kind in ("read", "write"):
                fn = getattr(calls, kind)
                name = f"guarded {kind}, {label}"
                cases[name] = fn
                floors[name] = floor
                counts[name] = count_exchanges(store, fn)
        if pg is not None:  # its table only once the store has made the schema its own (a store refuses other tables)
            cases = {"raw psycopg": pg_floor(pg[1]), **cases}
        medians = measure(cases, args.rounds, args.batch)

    width = max(len(n) for n in cases) + 2
    print(f"{'case':<{width}}{'median us':>11}{'x floor':>9}{'statements':>12}{'round trips':>13}")
    for name in cases:
        ratio = f"{medians[name] / medians[floors[name]]:.1f}" if name in floors else ""
        statements, trips = counts.get(name, (None, None))
        shown_trips = trips if trips is not None else ("in-process" if name in counts else "")
        shown_statements = "" if statements is None else statements
        print(f"{name:<{width}}{medians[name]:>11.0f}{ratio:>9}{shown_statements!s:>12}{shown_trips!s:>13}")
    print(
        "\nstatements: sent by the store for one guarded call (SQLite: BEGIN IMMEDIATE and COMMIT included);"
        "\nround trips: client/server exchanges of one guarded call (libpq trace; SQLite runs in-process)."
    )
    for store in stores:
        store.close()


if __name__ == "__main__":
    main()
