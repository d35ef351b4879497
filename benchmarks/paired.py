"""How every benchmark here measures a ratio, and how it prints its table.

A figure is the ratio of a case to its reference (a guarded run to the plain one, a guarded call to the raw
database floor), measured as *interleaved pairs*: each pair runs both back to back (who goes first alternates), and
the figure is the median of the pairs' ratios with their min and max. Pairs share the machine's state at that moment
(another process's load, the disk's queue), so their ratio is steadier than a ratio of two medians.

After the warm-up every benchmark calls :func:`freeze_heap`: what the warm-up built (modules, agents, connections)
moves out of the garbage collector's generations, so a full collection over it (100-140 ms at ~200k objects) no
longer lands on one side of a pair at random.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

PG_ENV = ("LOOPGUARD_BENCH_POSTGRES_URL", "LOOPGUARD_TEST_POSTGRES_URL")


@dataclass(frozen=True)
class Ratio:
    """The median, min and max of the pair ratios, and the median seconds of each side."""

    median: float
    low: float
    high: float
    case_s: float
    reference_s: float
    pairs: int

    def __str__(self) -> str:
        return f"{self.median:.3f} ({self.low:.2f}-{self.high:.2f})"


def freeze_heap() -> None:
    """Collect, then move every object alive now out of the collector's generations (``gc.freeze``)."""
    gc.collect()
    gc.freeze()


def summarize(pairs: Sequence[tuple[float, float]]) -> Ratio:
    ratios = [case / reference for case, reference in pairs]
    return Ratio(
        statistics.median(ratios),
        min(ratios),
        max(ratios),
        statistics.median(c for c, _ in pairs),
        statistics.median(r for _, r in pairs),
        len(pairs),
    )


def paired(case: Callable[[], Any], reference: Callable[[], Any], pairs: int, *, warmup: int = 2) -> Ratio:
    """Interleaved pairs of two synchronous callables: the ratio case / reference of wall-clock seconds."""
    for _ in range(warmup):
        case()
        reference()
    freeze_heap()
    samples: list[tuple[float, float]] = []
    for i in range(pairs):
        order = (case, reference) if i % 2 == 0 else (reference, case)
        took = {}
        for fn in order:
            start = time.perf_counter()
            fn()
            took[fn] = time.perf_counter() - start
        samples.append((took[case], took[reference]))
    return summarize(samples)


async def apaired(
    case: Callable[[], Awaitable[Any]], reference: Callable[[], Awaitable[Any]], pairs: int, *, warmup: int = 2
) -> Ratio:
    """:func:`paired` for coroutine functions (run in the caller's event loop)."""
    for _ in range(warmup):
        await case()
        await reference()
    freeze_heap()
    samples: list[tuple[float, float]] = []
    for i in range(pairs):
        first, second = (case, reference) if i % 2 == 0 else (reference, case)
        start = time.perf_counter()
        await first()
        middle = time.perf_counter()
        await second()
        end = time.perf_counter()
        a, b = middle - start, end - middle
        samples.append((a, b) if first is case else (b, a))
    return summarize(samples)


def run_paired_async(
    case: Callable[[], Awaitable[Any]], reference: Callable[[], Awaitable[Any]], pairs: int, *, warmup: int = 2
) -> Ratio:
    return asyncio.run(apaired(case, reference, pairs, warmup=warmup))


# --- the store's time inside a run ----------------------------------------------------------------------------------


class StoreClock:
    """While :meth:`installed`, every call of the store's public methods is timed (the outermost call only, so a
    method calling another is counted once): ``seconds`` in all, ``calls`` and ``by_method`` (seconds) by method."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.seconds = 0.0
        self.calls: dict[str, int] = {}
        self.by_method: dict[str, float] = {}
        self._depth = 0

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    took = time.perf_counter() - start
                    self.seconds += took
                    self.calls[name] = self.calls.get(name, 0) + 1
                    self.by_method[name] = self.by_method.get(name, 0.0) + took

        return timed

    @contextmanager
    def installed(self) -> Iterator[StoreClock]:
        from agents_loopguard import Store

        names = [n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))]
        for name in names:
            setattr(self.store, name, self._timed(name, getattr(self.store, name)))
        try:
            yield self
        finally:
            for name in names:
                delattr(self.store, name)


@dataclass(frozen=True)
class Inside:
    """The store's time inside one guarded run (medians over a few runs): in all, and by method with its calls."""

    seconds: float
    by_method: dict[str, tuple[float, int]] = field(default_factory=dict)
    """method -> (median seconds per run, calls per run)."""

    def top(self, n: int = 3) -> str:
        """The methods that took most, as ``name calls x us``."""
        ranked = sorted(self.by_method.items(), key=lambda item: -item[1][0])[:n]
        return ", ".join(f"{name} {n} x {seconds / max(n, 1) * 1e6:.0f} us" for name, (seconds, n) in ranked)


def _inside(clocks: Sequence[StoreClock]) -> Inside:
    names = {name for clock in clocks for name in clock.by_method}
    by_method = {
        name: (
            statistics.median(clock.by_method.get(name, 0.0) for clock in clocks),
            int(statistics.median(clock.calls.get(name, 0) for clock in clocks)),
        )
        for name in names
    }
    return Inside(statistics.median(clock.seconds for clock in clocks), by_method)


def measure_inside(case: Callable[[], Any], reference: Callable[[], Any], store: Any, runs: int) -> Inside:
    """The store's time inside a guarded run ``case`` (each after a ``reference`` run, as in the pairs)."""
    clocks = []
    for _ in range(runs):
        reference()
        with StoreClock(store).installed() as clock:
            case()
        clocks.append(clock)
    return _inside(clocks)


async def ameasure_inside(
    case: Callable[[], Awaitable[Any]], reference: Callable[[], Awaitable[Any]], store: Any, runs: int
) -> Inside:
    """:func:`measure_inside` for coroutine functions."""
    clocks = []
    for _ in range(runs):
        await reference()
        with StoreClock(store).installed() as clock:
            await case()
        clocks.append(clock)
    return _inside(clocks)


async def astore_seconds(
    case: Callable[[], Awaitable[Any]], reference: Callable[[], Awaitable[Any]], store: Any, runs: int
) -> float:
    """Median seconds the store took inside one guarded run (each after a plain run, as in the pairs)."""
    return (await ameasure_inside(case, reference, store, runs)).seconds


def store_seconds(case: Callable[[], Any], reference: Callable[[], Any], store: Any, runs: int) -> float:
    """:func:`astore_seconds` for a synchronous run."""
    return measure_inside(case, reference, store, runs).seconds


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (it reads as a plain-text table in a terminal too)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def goal_cell(ratio: float, goal: float) -> str:
    return f"<= {goal:.2f}: {'met' if ratio <= goal else 'missed'}"


def postgres_url() -> str | None:
    return next((os.environ[k] for k in PG_ENV if os.environ.get(k)), None)


@contextmanager
def pg_schema() -> Iterator[tuple[str, str] | None]:
    """A fresh schema on the benchmark's PostgreSQL server: (SQLAlchemy URL, libpq URL), dropped afterwards."""
    url = postgres_url()
    if url is None:
        yield None
        return
    import psycopg
    from sqlalchemy.engine import make_url

    schema = f"lg_bench_{uuid.uuid4().hex[:8]}"
    base = make_url(url).set(drivername="postgresql")
    admin = psycopg.connect(base.render_as_string(hide_password=False), autocommit=True)
    admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        scoped = make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
        libpq = scoped.set(drivername="postgresql").render_as_string(hide_password=False)
        yield scoped.render_as_string(hide_password=False), libpq
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()


def machine() -> dict[str, str]:
    """What the figures were measured on: CPU, cores, Python, PostgreSQL server version, the disk's fsync time."""
    import sqlite3
    import tempfile

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    fsyncs = []
    with tempfile.NamedTemporaryFile(dir=os.environ.get("LOOPGUARD_BENCH_DIR")) as f:
        for _ in range(30):
            f.write(b"x" * 4096)
            f.flush()
            start = time.perf_counter()
            os.fsync(f.fileno())
            fsyncs.append(time.perf_counter() - start)
    found = {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "fsync": f"{statistics.median(fsyncs) * 1e6:.0f} us (median of 30 fsyncs of a 4 KiB append, temp folder)",
    }
    url = postgres_url()
    if url is not None:
        import psycopg
        from sqlalchemy.engine import make_url

        libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(libpq) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            sync = conn.execute("SHOW synchronous_commit").fetchone()
            found["postgresql"] = f"{row[0] if row else '?'} (synchronous_commit={sync[0] if sync else '?'})"
    return found
