"""What ``loopguard mcp`` adds to one ``tools/call``: through the proxy vs straight to the upstream, over stdio.

Run: ``python benchmarks/bench_mcp.py`` (``--quick`` for a short run, ``--pairs N`` to choose the pairs).

The upstream is the FastMCP-style payment server of the tests (tests/support/mcp_upstream.py, its logs off), a
real process. Direct: one ``mcp`` client session that started the upstream. Proxy: one client session that started
``loopguard mcp`` (a real process), which started its own upstream; every call is a declared read (``search``, a
new query each time, so no identical-call cut) under one fixed task whose budget never runs out. Both sessions are
open at once and the calls are made as interleaved pairs (``paired.py``, who goes first alternating): the figures
are the median (min-max) of the pairs' ratios and the median of the pairs' differences (the added latency). Stores:
a SQLite file, and PostgreSQL when ``LOOPGUARD_BENCH_POSTGRES_URL`` (or ``LOOPGUARD_TEST_POSTGRES_URL``) is set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment
from paired import Ratio, freeze_heap, machine, pg_schema, summarize, table

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = [sys.executable, "-m", "tests.support.mcp_upstream"]
CONFIG = """
[upstream]
command = {command}
name = "payments"
trusted = true
unguarded = {{ lookup = "an invoice lookup" }}

[task]
by = "fixed"
id = "bench-{run}"

[budget]
tool_executions = 1000000

[tools.search]
kind = "read"

[tools.pay]
kind = "write"

[tools.refund]
kind = "write"
"""


def stdio(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:], env=get_default_environment(), cwd=str(ROOT))


@asynccontextmanager
async def sessions(url: str, folder: Path) -> AsyncIterator[tuple[Client, Client]]:
    """(a client of the proxy, a client of the upstream), both sessions open."""
    config = folder / "proxy.toml"
    config.write_text(CONFIG.format(command=json.dumps(UPSTREAM), run=folder.name), encoding="utf-8")
    proxy = stdio([sys.executable, "-m", "agents_loopguard", "--db", url, "mcp", str(config)])
    async with AsyncExitStack() as stack:
        through = await stack.enter_async_context(Client(proxy, cache=None))
        direct = await stack.enter_async_context(Client(stdio(UPSTREAM), cache=None))
        yield through, direct


async def pairs_of(
    case: Callable[[int], Awaitable[Any]], reference: Callable[[int], Awaitable[Any]], pairs: int, warmup: int
) -> tuple[Ratio, float]:
    """Interleaved pairs: the ratio case / reference and the median of the pairs' differences (seconds)."""
    for i in range(warmup):
        await case(-1 - i)
        await reference(-1 - i)
    freeze_heap()
    samples: list[tuple[float, float]] = []
    for i in range(pairs):
        first, second = (case, reference) if i % 2 == 0 else (reference, case)
        start = time.perf_counter()
        await first(i)
        middle = time.perf_counter()
        await second(i)
        end = time.perf_counter()
        a, b = middle - start, end - middle
        samples.append((a, b) if first is case else (b, a))
    return summarize(samples), statistics.median(c - r for c, r in samples)


async def measure(url: str, pairs: int, warmup: int) -> tuple[Ratio, float]:
    with tempfile.TemporaryDirectory() as folder:
        async with sessions(url, Path(folder)) as (through, direct):

            async def call(client: Client, i: int) -> None:
                result = await client.call_tool("search", {"query": f"invoice {i}"})
                if result.is_error:
                    raise RuntimeError(f"the call failed: {result.content}")

            return await pairs_of(lambda i: call(through, i), lambda i: call(direct, i), pairs, warmup)


def sqlite_url(folder: Path) -> str:
    from agents_loopguard.store.sql import SQLStore

    url = f"sqlite:///{folder / 'bench.db'}"
    SQLStore(url).close()  # created and migrated before the proxy opens it
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="20 pairs")
    options = parser.parse_args()
    pairs = 20 if options.quick else options.pairs
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        ratio, added = asyncio.run(measure(sqlite_url(Path(folder)), pairs, warmup=5))
        rows.append(["SQLite file", f"{ratio.reference_s * 1e3:.2f}", f"{ratio.case_s * 1e3:.2f}", ratio, added])
    with pg_schema() as pg:
        if pg is not None:
            from agents_loopguard.store.sql import SQLStore

            SQLStore(pg[0]).close()
            ratio, added = asyncio.run(measure(pg[0], pairs, warmup=5))
            rows.append(["PostgreSQL", f"{ratio.reference_s * 1e3:.2f}", f"{ratio.case_s * 1e3:.2f}", ratio, added])
    print(f"loopguard mcp: one tools/call through the proxy vs straight to the upstream, stdio ({pairs} pairs)")
    print(", ".join(f"{k}: {v}" for k, v in machine().items()))
    headers = ["store", "direct ms (median)", "proxy ms (median)", "ratio (min-max)", "added ms (median)"]
    print(table(headers, [[*row[:4], f"{row[4] * 1e3:.2f}"] for row in rows]))


if __name__ == "__main__":
    main()
