"""SDK adapter benchmark: ``run_guarded`` next to a plain ``Runner.run``, same agent, same scripted model.

Run: ``python benchmarks/bench_sdk.py`` (``--quick`` for a short run, ``--reps N`` to choose the repetitions).

Each scenario is an agent that makes N tool calls, one per model turn (each call makes verified progress, so the
guard lets all of them run), then answers: N = 10 and N = 100. Each store is measured against its own plain runs,
the two interleaved in one process (alternating who goes first); each figure is the median of the repetitions, and
the ratio guarded / plain is what to compare (absolute times vary on a noisy machine). Both wall-clock and CPU time
are shown: wall is what a caller waits (SQLite's fsync included), CPU time is steadier when other processes compete
for the cores. Stores: the in-process MemoryStore, and the SQLStore on a SQLite file (the default
``synchronous=WRITES``: fsync only for the commits that protect writes and decisions; ``FULL``; ``NORMAL``).

Goals: ratio <= 1.05 with the memory store, <= 1.15 with SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, MemoryStore, Store
from agents_loopguard.sdk import guarded_tool, run_guarded

try:
    from agents_loopguard.store.sql import SQLStore
except ImportError:  # pragma: no cover - the SQL store ships with the package; keep the benchmark usable without it
    SQLStore = None  # type: ignore[assignment,misc]


def lookup(n: int) -> str:
    """Look up record n."""
    return f"record {n}: ok"


def verify(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": int(args["n"]), "done": False, "effect": "none"}


PLAIN = function_tool(lookup)
GUARDED = guarded_tool(verify=verify)(lookup)


def model(turns: int) -> ScriptedModel:
    steps: list[Any] = [[function_call("lookup", {"n": i}, call_id=f"call_{i}")] for i in range(1, turns + 1)]
    return ScriptedModel([*steps, [assistant_message("done")]])


def plain(turns: int) -> Callable[[], Awaitable[Any]]:
    async def go() -> Any:
        agent = Agent(name="bench", model=model(turns), tools=[PLAIN])
        result = await Runner.run(agent, "go", max_turns=turns + 2)
        assert result.final_output == "done"

    return go


def guarded(turns: int, store: Store) -> Callable[[], Awaitable[Any]]:
    budget = Budget(model_turns=turns + 1, tool_executions=turns)

    async def go() -> Any:
        agent = Agent(name="bench", model=model(turns), tools=[GUARDED])
        outcome = await run_guarded(
            agent,
            "go",
            budget=budget,
            store=store,
            task_id=f"bench-{uuid.uuid4().hex}",
            max_turns=turns + 2,
            verify_output=lambda output: output == "done",  # the application accepts the answer: completed
        )
        assert outcome.done and outcome.used.tools == turns, outcome

    return go


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one run (CPU time includes the SDK's worker threads of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    await fn()
    return time.perf_counter() - wall, time.process_time() - cpu


async def bench(variants: dict[str, Callable[[], Awaitable[Any]]], reps: int) -> dict[str, tuple[float, float]]:
    """Median (wall, cpu) seconds per variant, the variants interleaved and rotating who goes first."""
    for fn in variants.values():  # warm up: imports, schema caches, SQL statements
        await fn()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    names = list(variants)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            samples[name].append(await timed(variants[name]))
    return {
        name: (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
        for name, values in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per variant (default 15, quick 5)")
    args = parser.parse_args()
    set_tracing_disabled(True)
    reps = args.reps or (5 if args.quick else 15)
    workdir = tempfile.mkdtemp(prefix="bench-sdk-")
    stores: dict[str, Store] = {"memory": MemoryStore()}
    if SQLStore is not None:
        stores["sqlite WRITES"] = SQLStore(f"sqlite:///{workdir}/writes.db")  # the default
        stores["sqlite FULL"] = SQLStore(f"sqlite:///{workdir}/full.db?synchronous=FULL")
        stores["sqlite NORMAL"] = SQLStore(f"sqlite:///{workdir}/normal.db?synchronous=NORMAL")
    else:
        print("agents_loopguard.store.sql is not importable: memory store only")
    goals = {"memory": 1.05, "sqlite WRITES": 1.15, "sqlite FULL": 1.15, "sqlite NORMAL": 1.15}
    long_reps = max(5, reps // 2)
    print(f"medians of {reps} interleaved repetitions ({long_reps} at 100 turns), each store against plain")
    print(f"{'turns':>5}  {'store':<14}{'plain ms':>9}{'guarded ms':>11}{'+ms/turn':>9}{'wall':>7}{'cpu':>7}  goal")
    for turns in (10, 100):
        for name, store in stores.items():
            variants = {"plain": plain(turns), "guarded": guarded(turns, store)}
            medians = asyncio.run(bench(variants, reps if turns == 10 else long_reps))
            (plain_wall, plain_cpu), (guarded_wall, guarded_cpu) = medians["plain"], medians["guarded"]
            wall, cpu = guarded_wall / plain_wall, guarded_cpu / plain_cpu
            added = (guarded_wall - plain_wall) * 1000 / turns
            goal = goals[name]
            print(
                f"{turns:>5}  {name:<14}{plain_wall * 1000:>9.1f}{guarded_wall * 1000:>11.1f}{added:>9.3f}"
                f"{wall:>7.3f}{cpu:>7.3f}  <= {goal:.2f}: wall {'ok' if wall <= goal else 'missed'}, "
                f"cpu {'ok' if cpu <= goal else 'missed'}"
            )
    for store in stores.values():
        close = getattr(store, "close", None)
        if close is not None:
            close()


if __name__ == "__main__":
    main()
