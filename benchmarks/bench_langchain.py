"""What the LangChain middleware adds to a whole ``create_agent`` run, beside what LangChain's own limits add.

Run: ``python benchmarks/bench_langchain.py`` (``--quick`` for a short run, ``--pairs N`` to choose the pairs).

One agent makes K = 10 tool calls, one per model turn (each verified progress, so the guard lets all of them run),
then answers. The chat model is the in-process ``ScriptedChatModel`` (no HTTP): the cheapest model there is, so the
ratios are the worst case a real model's latency would dilute. The same compiled graph shape runs:

- ``plain``: ``create_agent(model, tools)``;
- ``limits``: with LangChain's ``ModelCallLimitMiddleware(run_limit=20)`` and ``ToolCallLimitMiddleware(run_limit=20)``
  (issue 19 measured them at 1.1-1.2x, in memory);
- ``pass-through``: a middleware with the guard's four hooks and state that does nothing (``before_agent``,
  ``after_agent`` return nothing, ``wrap_model_call`` / ``wrap_tool_call`` call the handler): what LangChain itself
  costs for any middleware of that shape, the floor under the guard's figures;
- ``guarded``: with ``LoopGuardMiddleware`` on a MemoryStore, and on a SQLStore SQLite file (a new task per run).

Each figure is the median, min and max of the ratios of interleaved pairs (case and reference back to back, who goes
first alternating; see ``paired.py``). After the pairs, a few more guarded runs time the store's methods inside the
run (``paired.StoreClock``). Goals (issue 19): guarded / plain, memory <= 1.05, SQLite <= 1.15; and cheaper than
LangChain's own limits (guarded / limits <= 1.00). A missed goal is reported with its floor: the pass-through's
ratio plus the store's time inside the run over the plain run (what no change to the middleware removes).
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
from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain_core.tools import tool
from paired import Inside, Ratio, goal_cell, machine, measure_inside, paired, table

from agents_loopguard import Budget, MemoryStore, Store
from agents_loopguard.langchain import LoopGuardMiddleware, LoopGuardState
from agents_loopguard.langchain.testing import ScriptedChatModel, calls
from agents_loopguard.run import declare_tool
from agents_loopguard.store.sql import SQLStore

K = 10
GOALS = {
    ("guarded", "memory"): 1.05,
    ("guarded", "sqlite"): 1.15,
    ("guarded vs limits", "memory"): 1.00,
    ("guarded vs limits", "sqlite"): 1.00,
}
REFERENCE = {"limits": "plain", "pass-through": "plain", "guarded": "plain", "guarded vs limits": "limits"}

Figure = tuple[str, str, Ratio]
"""(case, store or "-", the ratio to its reference)."""


@tool
def lookup(n: int) -> str:
    """Look item n up."""
    return f"item {n}"


def verify(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": args["n"], "done": False, "effect": "none"}


class PassThrough(AgentMiddleware[LoopGuardState, Any, Any]):
    """The guard's hooks and state, doing nothing."""

    state_schema = LoopGuardState

    def before_agent(self, state: Any, runtime: Any) -> None:
        return None

    def after_agent(self, state: Any, runtime: Any) -> None:
        return None

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)


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


def measure(pairs: int, inside_runs: int | None = None) -> tuple[list[Figure], dict[str, Inside]]:
    """The figures, and for each store the store's time inside one guarded run."""
    figures: list[Figure] = []
    inside: dict[str, Inside] = {}
    plain, theirs = runner([]), limits()
    for case, run in (("limits", theirs), ("pass-through", runner([PassThrough()]))):
        figures.append((case, "-", paired(run, plain, pairs)))
        print(f"  langchain {case}/plain: {figures[-1][2]}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        sql = SQLStore(f"sqlite:///{workdir}/bench.db")
        for name, store in (("memory", MemoryStore()), ("sqlite", sql)):
            ours = guarded(store)
            figures.append(("guarded", name, paired(ours, plain, pairs)))
            print(f"  langchain guarded {name}/plain: {figures[-1][2]}", file=sys.stderr, flush=True)
            figures.append(("guarded vs limits", name, paired(ours, theirs, pairs)))
            print(f"  langchain guarded {name}/limits: {figures[-1][2]}", file=sys.stderr, flush=True)
            inside[name] = measure_inside(ours, plain, store, inside_runs or max(5, pairs // 3))
        sql.close()
    return figures, inside


def render(figures: list[Figure], inside: dict[str, Inside]) -> str:
    headers = ["case / reference", "store", f"ratio at K={K}: median (min-max)", "case ms", "reference ms"]
    headers += ["store ms inside", "pairs", "goal"]
    rows = []
    for case, store, r in figures:
        goal = GOALS.get((case, store))
        seconds = inside[store].seconds if case.startswith("guarded") and store in inside else None
        rows.append(
            [
                f"{case} / {REFERENCE[case]}",
                store,
                str(r),
                f"{r.case_s * 1e3:.2f}",
                f"{r.reference_s * 1e3:.2f}",
                f"{seconds * 1e3:.2f}" if seconds is not None else "",
                r.pairs,
                goal_cell(r.median, goal) if goal is not None else "",
            ]
        )
    return table(headers, rows)


def goal_rows(figures: list[Figure], inside: dict[str, Inside]) -> list[list[str]]:
    """One row per goal: measured, met or missed, and for a missed one its floor: LangChain's own cost of a
    middleware of this shape (the pass-through's ratio) plus the store's time inside the run over the plain run
    (against LangChain's limits: that floor over the limits' own ratio)."""
    ratio = {(case, store): r for case, store, r in figures}
    through, theirs = ratio.get(("pass-through", "-")), ratio.get(("limits", "-"))
    rows = []
    for case, store, r in figures:
        goal = GOALS.get((case, store))
        if goal is None:
            continue
        met = r.median <= goal
        floor = ""
        versus = ratio.get(("guarded", store))
        if not met and through is not None and theirs is not None and versus is not None and store in inside:
            held, plain_s = inside[store], versus.reference_s
            bound = through.median + held.seconds / plain_s
            rest = (versus.case_s - plain_s * bound) * 1e3 / K
            floor = (
                f"floor {bound:.2f} x plain = LangChain's own cost of a pass-through middleware with the same hooks "
                f"({through.median:.3f}) + the store inside the run ({held.seconds * 1e3:.2f} ms of a "
                f"{plain_s * 1e3:.1f} ms plain run: {held.top()}); the middleware, guarded run and engine add "
                f"{rest:+.2f} ms per turn over it"
            )
            if case == "guarded vs limits":
                floor = f"{bound / theirs.median:.2f} x limits (their own {theirs.median:.3f} x plain): " + floor
        rows.append(
            [
                f"langchain, {store}, K={K}: {case} / {REFERENCE[case]} <= {goal:.2f}",
                str(r),
                "met" if met else "missed",
                floor,
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer pairs")
    parser.add_argument("--pairs", type=int, default=None, help="pairs per figure (default 31, quick 7)")
    args = parser.parse_args()
    pairs = args.pairs or (7 if args.quick else 31)
    print(", ".join(f"{k}: {v}" for k, v in machine().items()), file=sys.stderr)
    figures, inside = measure(pairs)
    print(render(figures, inside))
    print()
    print(table(["goal", "measured", "", "floor that stops it"], goal_rows(figures, inside)))


if __name__ == "__main__":
    main()
