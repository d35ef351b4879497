"""What the LangChain middleware adds to a whole ``create_agent`` run, beside what LangChain's own limits add.

Run: ``python benchmarks/bench_langchain.py`` (``--quick`` for a short run, ``--pairs N`` to choose the pairs).

One agent makes K = 10 tool calls, one per model turn (each verified progress, so the guard lets all of them run),
then answers. The chat model is the in-process ``ScriptedChatModel`` (no HTTP): the cheapest model there is, so the
ratios are the worst case a real model's latency would dilute. The same compiled graph shape runs:

- ``plain``: ``create_agent(model, tools)``;
- ``limits``: with LangChain's ``ModelCallLimitMiddleware(run_limit=20)`` and ``ToolCallLimitMiddleware(run_limit=20)``
  (issue 19 measured them at 1.1-1.2x, in memory);
- ``guarded``: with ``LoopGuardMiddleware`` on a MemoryStore, and on a SQLStore SQLite file (a new task per run).

Each figure is the median, min and max of the ratios of interleaved pairs (case and reference back to back, who goes
first alternating; see ``paired.py``). Goals (issue 19): memory <= 1.05, SQLite <= 1.15 against plain.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain_core.tools import tool
from paired import Ratio, goal_cell, machine, paired, table

from agents_loopguard import Budget, MemoryStore, Store
from agents_loopguard.langchain import LoopGuardMiddleware
from agents_loopguard.langchain.testing import ScriptedChatModel, calls
from agents_loopguard.run import declare_tool
from agents_loopguard.store.sql import SQLStore

K = 10
GOALS = {("guarded", "memory"): 1.05, ("guarded", "sqlite"): 1.15}


@tool
def lookup(n: int) -> str:
    """Look item n up."""
    return f"item {n}"


def verify(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": args["n"], "done": False, "effect": "none"}


def replies() -> list[Any]:
    return [calls(("lookup", {"n": n}), start=n) for n in range(1, K + 1)] + ["all items looked up"]


def runner(middleware: list[Any]) -> Callable[[], Any]:
    model = ScriptedChatModel(replies())
    agent = create_agent(model, tools=[lookup], middleware=middleware)
    request = {"messages": [{"role": "user", "content": "look up the items"}]}

    def go() -> Any:
        model.requests.clear()
        return agent.invoke(request, {"recursion_limit": 100})

    return go


def guarded(store: Store) -> Callable[[], Any]:
    guard = LoopGuardMiddleware(
        budget=Budget(model_turns=K + 5, tool_executions=K + 5),
        store=store,
        tools={"lookup": declare_tool("lookup", verify=verify)},
    )
    go = runner([guard])

    def checked() -> Any:
        result = go()
        outcome = guard.outcome(result)
        assert outcome is not None and outcome.used.tools == K, outcome
        return result

    return checked


def limits() -> Callable[[], Any]:
    return runner([ModelCallLimitMiddleware(run_limit=2 * K), ToolCallLimitMiddleware(run_limit=2 * K)])


def measure(pairs: int) -> list[tuple[str, str, Ratio]]:
    figures: list[tuple[str, str, Ratio]] = []
    plain = runner([])
    theirs = limits()
    figures.append(("limits", "plain", paired(theirs, plain, pairs)))
    print(f"  limits/plain: {figures[-1][2]}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        sql = SQLStore(f"sqlite:///{workdir}/bench.db")
        for name, store in (("memory", MemoryStore()), ("sqlite", sql)):
            ours = guarded(store)
            figures.append(("guarded", name, paired(ours, plain, pairs)))
            print(f"  guarded {name}/plain: {figures[-1][2]}", file=sys.stderr, flush=True)
            figures.append(("guarded vs limits", name, paired(ours, theirs, pairs)))
            print(f"  guarded {name}/limits: {figures[-1][2]}", file=sys.stderr, flush=True)
        sql.close()
    return figures


def render(figures: list[tuple[str, str, Ratio]]) -> str:
    headers = ["case", "store", f"ratio at K={K}: median (min-max)", "case ms", "reference ms", "pairs", "goal"]
    rows = []
    for case, store, r in figures:
        goal = GOALS.get((case, store))
        reference = "limits" if case == "guarded vs limits" else "plain"
        rows.append(
            [
                f"{case} / {reference}",
                store if case != "limits" else "-",
                str(r),
                f"{r.case_s * 1e3:.2f}",
                f"{r.reference_s * 1e3:.2f}",
                r.pairs,
                goal_cell(r.median, goal) if goal is not None else "",
            ]
        )
    return table(headers, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer pairs")
    parser.add_argument("--pairs", type=int, default=None, help="pairs per figure (default 31, quick 7)")
    args = parser.parse_args()
    pairs = args.pairs or (7 if args.quick else 31)
    print(", ".join(f"{k}: {v}" for k, v in machine().items()), file=sys.stderr)
    print(render(measure(pairs)))


if __name__ == "__main__":
    main()
