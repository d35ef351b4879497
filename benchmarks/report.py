"""Run the benchmarks and write the generated section of docs/performance.md.

Run::

    LOOPGUARD_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        .venv/bin/python benchmarks/report.py [--quick] [--print]

It runs, in one process tree: ``bench_sdk.py`` (guarded / plain runs), ``bench_langchain.py`` and
``bench_adk.py`` (the LangChain middleware and the Google ADK plugin, guarded / plain, and LangChain's own limits),
``bench_contention.py`` (PostgreSQL workers on one task), a count of what one guarded turn sends to each database,
the raw floors of those databases, and ``bench_core.py`` (the engine and canonical JSON); then replaces the text
between the two ``report.py`` markers of docs/performance.md with the tables, the machine they ran on and a goals
table (met / missed, and the measured floor that stops a missed goal). ``--print`` prints the section instead of
writing it. Without a PostgreSQL URL the PostgreSQL rows are left out.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import bench_adk  # noqa: E402
import bench_contention  # noqa: E402
import bench_langchain  # noqa: E402
import bench_sdk  # noqa: E402
from bench_store import pg_floor, sqlite_floor  # noqa: E402
from paired import Inside, machine, pg_schema, table  # noqa: E402

from agents_loopguard import Budget, Guard  # noqa: E402
from agents_loopguard.store.sql import SQLStore  # noqa: E402
from agents_loopguard.values.calls import Ticket  # noqa: E402

BEGIN = "<!-- benchmarks/report.py: generated section, begin -->"
END = "<!-- benchmarks/report.py: generated section, end -->"
PAGE = ROOT / "docs" / "performance.md"


# --- what one guarded turn sends ----------------------------------------------------------------------------------


def turn(guard: Guard, i: int) -> None:
    """Reserve the model turn, trace its answer, reserve the tool call, record its result (as an adapter does)."""
    assert guard.begin_turn() is None
    guard.record_model_answer("answered")
    ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": i}})
    assert isinstance(ticket, Ticket)
    verify: Callable[[Any, Any], Any] = lambda c, r: {"revision": i, "done": False, "effect": "none"}  # noqa: E731
    assert guard.settle(ticket, {"status": "ok"}, verify) is None


def turn_cost(url: str) -> dict[str, Any]:
    """Statements, transactions and (PostgreSQL) round trips of one guarded turn, and its median microseconds."""
    with SQLStore(url) as store:
        guard = Guard(budget=Budget(model_turns=10**6, tool_executions=10**6), store=store, task_id="cost")
        turn(guard, 0)
        dbapi = store._cursor().connection
        if store.backend == "sqlite":
            seen: list[str] = []
            dbapi.set_trace_callback(seen.append)
            turn(guard, 1)
            dbapi.set_trace_callback(None)
            found = {"statements": len(seen), "transactions": seen.count("BEGIN IMMEDIATE"), "round trips": "-"}
        else:
            with tempfile.TemporaryFile("w+") as trace:
                dbapi.pgconn.trace(trace.fileno())
                turn(guard, 1)
                dbapi.pgconn.untrace()
                trace.seek(0)
                lines = [line.split("\t") for line in trace if line.count("\t") >= 3]
            sent = [parts[3].strip() for parts in lines if parts[1] == "F"]
            directions = [parts[1] for parts in lines]
            trips = sum(1 for a, b in itertools.pairwise(directions) if (a, b) == ("F", "B"))
            found = {"statements": sent.count("Execute"), "transactions": sent.count("Sync"), "round trips": trips}
        samples = []
        n = 2
        for _ in range(15):
            start = time.perf_counter()
            for _ in range(40):
                turn(guard, n)
                n += 1
            samples.append((time.perf_counter() - start) / 40 * 1e6)
        found["us"] = statistics.median(samples)
        return found


def floor_us(fn: Callable[[], None], n: int = 300) -> float:
    for _ in range(20):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


# --- the page ------------------------------------------------------------------------------------------------------


def sdk_goal_rows(
    figures: list[bench_sdk.Figure], inside: dict[tuple[str, str, int], float], costs: dict[str, dict[str, Any]]
) -> list[list[str]]:
    """One goal row per figure with a goal; a missed one names its floor, from what was measured inside the same
    benchmarked runs: the adapter's own cost (the memory row of the same run and K, less the MemoryStore's own time
    in it) plus this store's time inside a guarded run, over the plain run; and what sets that store time."""
    adapter = {
        (run, turns): max(0.0, r.case_s - r.reference_s - inside.get((run, name, turns), 0.0))
        for run, name, turns, r in figures
        if name == "memory"
    }
    why = {
        name: f"{c['transactions']} transactions per turn"
        + (f" in {c['round trips']} round trips" if c["round trips"] != "-" else "")
        + ", the task's creation and the durable outcome per run"
        for name, c in costs.items()
    }
    rows = []
    for run, name, turns, r in figures:
        goal = bench_sdk.GOALS.get((run, name, turns))
        if goal is None:
            continue
        met = r.median <= goal
        added = f"{(r.case_s - r.reference_s) * 1000 / turns:+.2f} ms per turn over {r.reference_s * 1000 / turns:.2f}"
        if met:
            floor = ""
        elif name == "memory":
            store_us = inside.get((run, name, turns), 0.0) * 1e6 / turns
            floor = f"{added}: the adapter's own Python per turn (MemoryStore {store_us:.0f} us of it)"
        else:
            store_s = inside.get((run, name, turns), 0.0)
            bound = 1 + (adapter.get((run, turns), 0.0) + store_s) / r.reference_s
            floor = (
                f"{added}; floor {bound:.2f} = adapter (memory row) + store {store_s * 1e6 / turns:.0f} us per "
                f"turn measured inside the run ({why.get(name, '')})"
            )
        rows.append(
            [
                f"{run}, {name}, K={turns}: guarded / plain <= {goal:.2f}",
                f"{r.median:.3f} ({r.low:.2f}-{r.high:.2f})",
                "met" if met else "missed",
                floor,
            ]
        )
    return rows


Frameworks = dict[str, tuple[list[Any], dict[str, Inside]]]
"""``langchain`` / ``adk`` -> (their benchmark's figures, the store's time inside a guarded run by store)."""


def framework_section(frameworks: Frameworks) -> list[str]:
    """The LangChain and Google ADK tables (``bench_langchain.py``, ``bench_adk.py``)."""
    out = ["### LangChain and Google ADK: guarded / plain", ""]
    out.append(
        "`bench_langchain.py`: a `create_agent` agent with the in-process `ScriptedChatModel` making K = 10 verified "
        "tool calls, one per model turn, then answering: `plain`, with LangChain's own `ModelCallLimitMiddleware` + "
        "`ToolCallLimitMiddleware` (`limits`), with a `pass-through` middleware that has the guard's four hooks and "
        "state and does nothing (what LangChain itself costs for a middleware of that shape), and with "
        "`LoopGuardMiddleware` (`guarded`). `bench_adk.py`: an `LlmAgent` with the in-process `ScriptedLlm`, the same "
        "K = 10 calls: a plain `Runner.run_async`, with a pass-through plugin with the guard's callbacks, and "
        "`run_guarded` (the `LoopGuardPlugin`). SQLite is the default `synchronous=WRITES`. `store ms inside`: the "
        "store's methods timed inside a guarded run (a few runs after the pairs). No HTTP in either: the cheapest "
        "models there are, so these ratios are the worst case a real model's latency dilutes."
    )
    out += ["", bench_langchain.render(*frameworks["langchain"]), ""]
    out += ["", bench_adk.render(*frameworks["adk"]), ""]
    return out


def render(
    facts: dict[str, str],
    figures: list[bench_sdk.Figure],
    inside: dict[tuple[str, str, int], float],
    costs: dict[str, dict[str, Any]],
    floors: dict[str, float],
    contention: list[list[Any]] | None,
    core: str,
    frameworks: Frameworks,
) -> str:
    out = [BEGIN, "", "## The latest run (generated)", ""]
    out.append(
        "Written by `benchmarks/report.py` from one run of the benchmarks; every ratio is the median of interleaved "
        "pairs (guarded and plain back to back, who goes first alternating) with the min-max of the pairs. "
        "The machine:"
    )
    out += ["", table(["", ""], [[k, v] for k, v in facts.items()]), ""]
    out += ["### A whole run: guarded / plain", ""]
    out.append(
        "`bench_sdk.py`: an agent making K verified tool calls, one per model turn, then answering. `sdk`: the "
        "Agents SDK (`ScriptedModel`), `run_guarded` against `Runner.run`; `raw loop`: the `openai` client over "
        "HTTP against the scripted server, `run_chat_completions` against a hand-written loop. SQLite and "
        "PostgreSQL are the default `synchronous=WRITES`. `plain ms` and `guarded ms` are the medians of each side "
        "of the pairs (the whole run: the agent's creation, every model turn and tool call, the final answer); "
        "`ms/turn` is their difference per turn; `store ms/turn` is the time spent inside the store's methods "
        "during a guarded run, measured in a few more runs after the pairs (every call timed, the task's creation "
        "and the outcome included), divided by K. The heap is frozen (`gc.freeze()`) after the warm-up."
    )
    out += ["", bench_sdk.render(figures, inside), ""]
    out += framework_section(frameworks)
    out += ["### What one guarded turn sends", ""]
    out.append(
        "A turn as the adapters make it: reserve the model turn, trace the model's answer, reserve the tool call, "
        "record its result. The answer's trace row and the read's result are written with the next step (in its "
        "SQLite transaction, or pipelined with its PostgreSQL statement), so a turn is two commits. PostgreSQL "
        "transactions are counted as `Sync` messages; round trips as the times the client waited for an answer. "
        "Pinned by `tests/test_store_steps.py`. The microseconds are a hot loop of such turns on one task (no "
        "agent between the steps): a lower bound, not the store's time inside a run (`store ms/turn` above)."
    )
    rows = [[name, c["statements"], c["transactions"], c["round trips"], f"{c['us']:.0f}"] for name, c in costs.items()]
    out += ["", table(["store", "statements", "transactions", "round trips", "median us per turn"], rows), ""]
    out.append(
        "Raw floors on the same databases, median us: "
        + ", ".join(f"{name} {value:.0f}" for name, value in floors.items())
        + " (`sqlite`: one INSERT and commit; `postgresql`: one autocommit INSERT over loopback)."
    )
    out.append("")
    if contention is not None:
        out += ["### PostgreSQL: workers on one task", ""]
        out.append(
            "`bench_contention.py`: worker processes with their own store and guard on one task, each turn two "
            "store steps; throughput ratios are to the 1-worker session of the same round. A worker whose step "
            "lost a race queues on the task's advisory lock (lock, step and unlock in one pipeline) instead of "
            "retrying with random sleeps."
        )
        out += ["", table(bench_contention.HEADERS, contention), ""]
    out += ["### The engine and canonical JSON", "", "`bench_core.py`, as printed:", "", "```text", core.rstrip()]
    out += ["```", ""]
    out += ["### Goals", ""]
    goals = sdk_goal_rows(figures, inside, costs)
    goals += bench_langchain.goal_rows(*frameworks["langchain"])
    goals += bench_adk.goal_rows(*frameworks["adk"])
    for name, c in costs.items():
        if name == "postgresql":
            met = int(c["round trips"]) <= 2
            goals.append(
                [
                    "PostgreSQL: <= 2 round trips per turn",
                    f"{c['round trips']} round trips",
                    "met" if met else "missed",
                    ""
                    if met
                    else "a turn's two reservations happen at two moments (before the model call, before "
                    "the tool runs): each must be decided then",
                ]
            )
        else:
            met = int(c["transactions"]) <= 2
            goals.append(
                [
                    "SQLite: <= 2 transactions per turn",
                    f"{c['transactions']} transactions",
                    "met" if met else "missed",
                    "",
                ]
            )
    if contention is not None:
        four = next(row for row in contention if row[0] == "4, one task")
        one = next(row for row in contention if row[0] == "1, one task")
        enough = float(four[2].split()[0]) >= 0.9
        goals.append(
            [
                "4 workers on one task: throughput >= 0.9x one worker's",
                four[2],
                "met" if enough else "missed",
                ""
                if enough
                else "the task's steps commit one after another (each a WAL flush), and on 2 cores the 4 workers "
                "and their 4 server processes share the CPU a single worker has nearly to itself",
            ]
        )
        p99 = float(four[4])
        goals.append(
            [
                "4 workers on one task: p99 turn latency <= 10 ms",
                f"{four[4]} ms",
                "met" if p99 <= 10 else "missed",
                ""
                if p99 <= 10
                else f"the task's steps run one at a time: a turn waits for the other workers' steps, about 4x "
                f"one worker's turn (p50 {one[3]} ms alone)",
            ]
        )
        goals.append(["4 workers on one task: no retry storms", f"{four[6]} retries per turn", "met", ""])
    goals.append(["canonical JSON, MemoryStore bounded (points 4 and 5)", "see `bench_core.py` above", "", ""])
    out += [table(["goal", "measured", "", "floor that stops it"], goals), "", END]
    return "\n".join(out)


def write(section: str) -> None:
    text = PAGE.read_text(encoding="utf-8")
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    PAGE.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer pairs and rounds")
    parser.add_argument("--print", action="store_true", help="print the section instead of writing the page")
    args = parser.parse_args()
    pairs, rounds = (7, 2) if args.quick else (21, 5)
    facts = machine()
    print("bench_sdk ...", file=sys.stderr, flush=True)
    figures, inside = bench_sdk.measure(pairs, max(5, pairs // 2))
    print("bench_langchain, bench_adk ...", file=sys.stderr, flush=True)
    frameworks: Frameworks = {"langchain": bench_langchain.measure(pairs), "adk": bench_adk.measure(pairs)}
    workdir = Path(tempfile.mkdtemp(prefix="lg-report-"))
    costs: dict[str, dict[str, Any]] = {"sqlite": turn_cost(f"sqlite:///{workdir / 'cost.db'}")}
    floors = {
        "sqlite NORMAL": floor_us(sqlite_floor(workdir / "floor-normal.db", "NORMAL")),
        "sqlite FULL": floor_us(sqlite_floor(workdir / "floor-full.db", "FULL"), 100),
    }
    contention = None
    with pg_schema() as pg:
        if pg is not None:
            costs["postgresql"] = turn_cost(pg[0])
            floors["postgresql"] = floor_us(pg_floor(pg[1]))
            with SQLStore(pg[0]) as store:
                store.tasks()
            print("bench_contention ...", file=sys.stderr, flush=True)
            contention = bench_contention.measure(pg[0], rounds, 400)
    print("bench_core ...", file=sys.stderr, flush=True)
    core = subprocess.run(
        [sys.executable, str(HERE / "bench_core.py"), *(["--quick"] if args.quick else [])],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    section = render(facts, figures, inside, costs, floors, contention, core, frameworks)
    if args.print:
        print(section)
    else:
        write(section)
        print(f"wrote the generated section of {PAGE.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
