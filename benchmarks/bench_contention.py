"""PostgreSQL contention: worker processes that share one task, next to one worker alone.

Run::

    LOOPGUARD_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        .venv/bin/python benchmarks/bench_contention.py [--rounds 5] [--turns 400]

Each worker is an OS process with its own ``SQLStore`` and ``Guard`` on the *same* task; a turn is what an agent
does per tool call: ``begin_turn`` (reserve a model turn), ``authorize`` (reserve a read) and ``settle`` (record its
result and progress), three store steps. A session runs ``--turns`` turns split over the workers, all started
together; its throughput is turns / wall seconds from the first start to the last end. Sessions of 1, 2, 4 and 8
workers run in rounds (the order rotating), and each N-worker figure is the median, min and max of its throughput
ratio to the 1-worker session *of the same round* (interleaved, as in ``paired.py``). Latency percentiles pool every
turn of every round; retries are the steps run again after losing a race, per turn. A last row gives 4 workers on
*separate* tasks (no shared row) as the reference for what the database itself allows.

Goals (issue 13): 4 workers on one task: p99 turn latency <= 10 ms, throughput >= 0.9x one worker's.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import freeze_heap, pg_schema, table

from agents_loopguard import Budget, Guard, Policy
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.calls import Ticket

BUDGET = Budget(model_turns=10**9, tool_executions=10**9)
POLICY = Policy(max_stalled=10**6, max_unverified=10**6)
WORKER_COUNTS = (1, 2, 4, 8)


def verify(call: Any, result: Any) -> dict[str, Any]:
    return {"revision": result["n"], "done": False, "effect": "none"}


def worker(url: str, task_id: str, me: int, turns: int, ready: Any, go: Any, out: Any) -> None:
    try:
        work(url, task_id, me, turns, ready, go, out)
    except BaseException as exc:
        ready.release()
        out.put(exc)
        raise


def work(url: str, task_id: str, me: int, turns: int, ready: Any, go: Any, out: Any) -> None:
    store = SQLStore(url)
    guard = Guard(budget=BUDGET, store=store, task_id=task_id, policy=POLICY)
    guard.begin_turn()  # connect, check the schema, prepare the statements
    freeze_heap()
    store._db.lost_races = 0
    ready.release()
    go.wait()
    latencies = []
    start = time.perf_counter()
    for i in range(turns):
        t0 = time.perf_counter()
        assert guard.begin_turn() is None
        ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": f"w{me}-{i}"}})
        assert isinstance(ticket, Ticket), ticket
        assert guard.settle(ticket, {"status": "ok", "n": time.monotonic_ns()}, verify) is None
        latencies.append(time.perf_counter() - t0)
    end = time.perf_counter()
    out.put((start, end, latencies, store._db.lost_races))
    store.close()


def session(url: str, workers: int, turns: int, *, shared: bool = True) -> dict[str, Any]:
    """One session: ``workers`` processes (spawned, then started together), ``turns`` turns in all."""
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    task = f"contention-{uuid.uuid4().hex[:8]}"
    each = turns // workers
    procs = [
        ctx.Process(target=worker, args=(url, task if shared else f"{task}-{w}", w, each, ready, go, out))
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    go.set()
    results = [out.get(timeout=300) for _ in procs]
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise RuntimeError(f"a worker failed: {failed[0]!r}")
    for p in procs:
        p.join()
        assert p.exitcode == 0, p.exitcode
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    latencies = [x for r in results for x in r[2]]
    return {
        "throughput": len(latencies) / wall,
        "latencies": latencies,
        "retries": sum(r[3] for r in results) / len(latencies),
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(url: str, rounds: int, turns: int) -> list[list[Any]]:
    per: dict[Any, list[dict[str, Any]]] = {n: [] for n in (*WORKER_COUNTS, "separate")}
    ratios: dict[Any, list[float]] = {n: [] for n in per}
    for r in range(rounds):
        order: list[Any] = [*WORKER_COUNTS[r % 4 :], *WORKER_COUNTS[: r % 4], "separate"]
        found = {}
        for n in order:
            found[n] = session(url, 4 if n == "separate" else n, turns, shared=n != "separate")
            per[n].append(found[n])
        for n in per:
            ratios[n].append(found[n]["throughput"] / found[1]["throughput"])
        print(f"  round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    rows = []
    for n, sessions in per.items():
        lat = [x for s in sessions for x in s["latencies"]]
        tp = statistics.median(s["throughput"] for s in sessions)
        ratio = ratios[n]
        goal = ""
        if n == 4:
            p99_ok, tp_ok = pct(lat, 0.99) <= 0.010, statistics.median(ratio) >= 0.9
            goal = f"p99 <= 10 ms: {'met' if p99_ok else 'missed'}; >= 0.90x: {'met' if tp_ok else 'missed'}"
        rows.append(
            [
                "4, separate tasks" if n == "separate" else f"{n}, one task",
                f"{tp:,.0f}",
                f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})",
                f"{pct(lat, 0.5) * 1000:.2f}",
                f"{pct(lat, 0.99) * 1000:.2f}",
                f"{max(lat) * 1000:.1f}",
                f"{statistics.mean(s['retries'] for s in sessions):.3f}",
                goal,
            ]
        )
    return rows


HEADERS = ["workers", "turns/s", "x 1 worker", "p50 ms", "p99 ms", "max ms", "retries/turn", "goal"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=400, help="turns per session, split over its workers")
    args = parser.parse_args()
    with pg_schema() as pg:
        if pg is None:
            raise SystemExit("set LOOPGUARD_TEST_POSTGRES_URL (or LOOPGUARD_BENCH_POSTGRES_URL) to a PostgreSQL URL")
        with SQLStore(pg[0]) as store:
            store.tasks()  # create the schema before the workers race to
        rows = measure(pg[0], args.rounds, args.turns)
    print(table(HEADERS, rows))


if __name__ == "__main__":
    main()
