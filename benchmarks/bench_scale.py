"""Scale benchmark (issue 30, R22): operator views, metrics, prune and a guarded turn on stores of 10^4, 10^5 and
10^6 tasks, on SQLite and PostgreSQL.

Run: ``python benchmarks/bench_scale.py`` (``--sizes 10000,100000`` for a shorter run, ``--backends sqlite``,
``--postgres URL``; ``LOOPGUARD_TEST_POSTGRES_URL`` otherwise). Each store is filled by bulk inserts through the
store's own tables (:mod:`tests.support.bulk`: about 10 trace rows per task, ids of three families, 5% stopped on
a loop, the last 5,000 tasks with 2% still running, one in 1,000 waiting on a write of unknown effect: a store whose
workers are healthy), so a million tasks take minutes, not hours. A scrape reads each running task through the
status index: tasks left "running" by dead workers that nobody recovered cost it linearly (2,000 of them: about
10 ms; ``loopguard tasks --status running --updated-before 1d`` finds them). Figures, each the median of
repeated runs with its ratio to the 10^4 store (flat is the point):

- bytes per task (and per trace row) of the store on disk;
- list: the first page of 20 tasks, and a page of 20 stopped tasks deep in the store (a cursor half-way down);
- show: one task's view (its last 50 steps, operations, pauses, transitions);
- scrape: ``GET /metrics``' exposition (the operations layer's measures, from the store's tallies);
- a guarded turn's store time (a model turn, a tool call authorized and settled) against an empty store's;
- prune throughput: tasks removed per second by ``ops.retention.prune`` in batches of 500 (measured last).

Goals at 10^6 tasks: list and show <= 50 ms, a scrape <= 250 ms, a guarded turn <= 1.1x the empty store's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents_loopguard import Budget, Guard, Verdict
from agents_loopguard.ops import operator, pages
from agents_loopguard.ops.retention import RetentionPolicy, prune
from agents_loopguard.server.metrics import StoreCollector, exposition
from agents_loopguard.store.sql import SQLStore
from tests.support.bulk import fill, shape

GOALS = {"list": 0.050, "list deep": 0.050, "show": 0.050, "scrape": 0.250}


def median(work: Callable[[], Any], repeat: int = 15) -> float:
    work()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def turn_time(store: SQLStore, steps: int = 200) -> float:
    """The median store time of one guarded step: a model turn, then a read authorized and settled."""
    guard = Guard(budget=Budget(steps + 5, steps + 5), store=store, task_id=f"bench-turn-{uuid.uuid4().hex[:8]}")
    times = []
    for n in range(steps):
        began = time.perf_counter()
        guard.begin_turn()
        ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"page": n}})
        assert not isinstance(ticket, Verdict)
        guard.settle(ticket, {"status": "ok"}, evidence={"revision": n + 1, "done": False, "effect": "none"})
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def size_of(store: SQLStore) -> int:
    if store.backend == "sqlite":
        with store.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            pages_, page = (conn.exec_driver_sql(f"PRAGMA {p}").scalar() for p in ("page_count", "page_size"))
        return int(pages_) * int(page)  # type: ignore[operator]
    with store.engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND left(c.relname, 10) = 'loopguard_'"
        ).scalar()
    return int(found or 0)


def measure(url: str, count: int, calls: int) -> dict[str, Any]:
    loaded = fill(url, count, calls=calls, healthy=True)
    figures: dict[str, Any] = {"fill seconds": loaded["seconds"]}
    with SQLStore(url) as store:
        figures["bytes per task"] = size_of(store) / count
        figures["bytes per trace row"] = figures["bytes per task"] / calls
        middle = pages.task_page(store, limit=20, status="stopped")
        half = shape(count // 2, count - 1 - count // 2)
        figures["list"] = median(lambda: pages.task_page(store, limit=20))
        cursor = pages._cursor((loaded["start"] + (count // 2) * loaded["step"], half.task_id))
        figures["list deep"] = median(lambda: pages.task_page(store, status="stopped", limit=20, cursor=cursor))
        assert middle["tasks"]
        some = shape(count // 3, count - 1 - count // 3).task_id
        figures["show"] = median(lambda: operator.task_view(store, some))
        collector = StoreCollector(store)
        figures["scrape"] = median(lambda: exposition(collector))
        figures["turn"] = turn_time(store)
        began = time.perf_counter()
        done = prune(store, RetentionPolicy(older_than_days=30), now=time.time(), batch=500, pause=0, max_batches=20)
        figures["prune tasks/s"] = done["removed"]["tasks"] / (time.perf_counter() - began)
    return figures


def empty_turn(url: str) -> float:
    with SQLStore(url) as store:
        return turn_time(store)


def schema_url(base: str) -> tuple[str, Callable[[], None]]:
    import psycopg
    from sqlalchemy.engine import make_url

    schema = f"lg_bench_{uuid.uuid4().hex[:10]}"
    raw = make_url(base).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(raw, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')

    def drop() -> None:
        with psycopg.connect(raw, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False), drop


def fresh(backend: str, folder: Path, name: str, postgres: str | None) -> tuple[str, Callable[[], None]]:
    if backend == "sqlite":
        path = folder / f"{name}.db"
        return f"sqlite:///{path}", lambda: [p.unlink(missing_ok=True) for p in folder.glob(f"{name}.db*")]
    assert postgres is not None
    return schema_url(postgres)


def run(backend: str, sizes: list[int], calls: int, folder: Path, postgres: str | None) -> None:
    print(f"\n== {backend} ({calls} calls per task) ==")
    url, drop = fresh(backend, folder, "empty", postgres)
    try:
        empty = empty_turn(url)
    finally:
        drop()
    print(f"guarded turn on an empty store: {empty * 1e3:.2f} ms")
    base: dict[str, Any] | None = None
    for count in sizes:
        url, drop = fresh(backend, folder, f"n{count}", postgres)
        try:
            figures = measure(url, count, calls)
        finally:
            drop()
        base = base or figures
        print(f"-- {count:,} tasks (filled in {figures['fill seconds']:.0f} s)")
        print(f"   bytes per task {figures['bytes per task']:.0f}, per trace row {figures['bytes per trace row']:.0f}")
        for key in ("list", "list deep", "show", "scrape"):
            goal = GOALS[key]
            verdict = "ok" if figures[key] <= goal else "OVER"
            ratio = figures[key] / base[key]
            shown = f"{figures[key] * 1e3:8.2f} ms  x{ratio:4.2f} of 10^4"
            print(f"   {key:<10} {shown}   goal <= {goal * 1e3:.0f} ms: {verdict}")
        turn = figures["turn"]
        print(
            f"   turn       {turn * 1e3:8.2f} ms  x{turn / base['turn']:4.2f} of 10^4   x{turn / empty:4.2f} of the "
            f"empty store (goal <= 1.1): {'ok' if turn <= 1.1 * empty else 'OVER'}"
        )
        print(f"   prune      {figures['prune tasks/s']:8.0f} tasks/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--postgres", default=os.environ.get("LOOPGUARD_TEST_POSTGRES_URL"))
    parser.add_argument("--folder", default=None, help="Where the SQLite files go (default: a temporary folder).")
    args = parser.parse_args()
    import tempfile

    folder = Path(args.folder or tempfile.mkdtemp(prefix="lg-bench-scale-"))
    sizes = [int(n) for n in args.sizes.split(",")]
    for backend in args.backends.split(","):
        if backend == "postgres" and not args.postgres:
            print("\n== postgres: skipped (set LOOPGUARD_TEST_POSTGRES_URL or --postgres) ==")
            continue
        run(backend, sizes, args.calls, folder, args.postgres)


if __name__ == "__main__":
    main()
