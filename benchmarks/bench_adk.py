"""What the Google ADK plugin adds to a whole ADK run: guarded / plain wall-clock ratio, same agent, same scripted
model (``agents_loopguard.adk.testing.ScriptedLlm``, in process: the figure is the plugin's cost, not a network's).

Run: ``python benchmarks/bench_adk.py`` (``--quick`` for a short run, ``--pairs N`` to choose the pairs).

An ``LlmAgent`` makes K = 10 tool calls, one per model turn (each call makes verified progress, so the guard lets
all of them run), then answers. Plain: ``Runner.run_async`` of an ``App`` without plugins; pass-through: the same
with a plugin that has the guard's callbacks and does nothing (what ADK itself costs for a plugin, the floor under
the guard's figures); guarded: :func:`agents_loopguard.adk.run_guarded` (the same runner with the
``LoopGuardPlugin``). Stores: the MemoryStore and SQLStore on a SQLite file. Each figure is the median (min-max) of
interleaved pairs' ratios (``paired.py``); after the pairs, a few more guarded runs time the store's methods inside
the run (``paired.StoreClock``). Goals (issue 19): memory <= 1.05, SQLite <= 1.15; a missed goal is reported with
its floor: the pass-through's ratio plus the store's time inside the run over the plain run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from paired import Inside, Ratio, ameasure_inside, apaired, goal_cell, machine, table

from agents_loopguard import Budget, MemoryStore, Store
from agents_loopguard.adk import guarded_tool, run_guarded
from agents_loopguard.adk.testing import ScriptedLlm, calls, text
from agents_loopguard.store.sql import SQLStore

K = 10
GOALS = {"memory": 1.05, "sqlite": 1.15}  # issue 19: the guarded ADK run may cost this much at K = 10

Figure = tuple[str, str, Ratio]
"""(case, store or "-", the ratio to the plain run)."""


def lookup(n: int) -> str:
    """Look record n up."""
    return f"record {n}"


def verify(args: Any, output: Any) -> dict[str, Any]:
    return {"revision": int(args["n"]) + 1, "done": False, "effect": "none"}


class PassThrough(BasePlugin):
    """The guard's callbacks, doing nothing."""

    def __init__(self) -> None:
        super().__init__(name="pass-through")

    async def before_run_callback(self, **_: Any) -> None:
        return None

    async def after_run_callback(self, **_: Any) -> None:
        return None

    async def before_model_callback(self, **_: Any) -> None:
        return None

    async def after_model_callback(self, **_: Any) -> None:
        return None

    async def before_tool_callback(self, **_: Any) -> None:
        return None

    async def after_tool_callback(self, **_: Any) -> None:
        return None


def model(turns: int) -> ScriptedLlm:
    return ScriptedLlm([*(calls(("lookup", {"n": i})) for i in range(turns)), text("done")])


def plain(turns: int, plugins: list[BasePlugin] | None = None) -> Callable[[], Awaitable[None]]:
    async def go() -> None:
        agent = LlmAgent(name="clerk", model=model(turns), tools=[lookup])
        app = App(name="bench", root_agent=agent, plugins=list(plugins or []))
        runner = Runner(app=app, session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name="bench", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text="go")])
        async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass

    return go


def guarded(turns: int, store: Store) -> Callable[[], Awaitable[None]]:
    tool = guarded_tool(lookup, verify=verify)

    async def go() -> None:
        agent = LlmAgent(name="clerk", model=model(turns), tools=[tool])
        budget = Budget(model_turns=turns + 2, tool_executions=turns + 1)
        outcome = await run_guarded(agent, "go", budget=budget, store=store, task_id=f"bench-{uuid.uuid4().hex}")
        assert outcome.used.tools == turns, outcome

    return go


async def ameasure(pairs: int, inside_runs: int) -> tuple[list[Figure], dict[str, Inside]]:
    figures: list[Figure] = []
    inside: dict[str, Inside] = {}
    reference = plain(K)
    figures.append(("pass-through", "-", await apaired(plain(K, [PassThrough()]), reference, pairs)))
    print(f"  adk pass-through/plain: {figures[-1][2]}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        sqlite = SQLStore(f"sqlite:///{Path(workdir) / 'bench.db'}")
        for name, store in (("memory", MemoryStore()), ("sqlite", sqlite)):
            ours = guarded(K, store)
            figures.append(("guarded", name, await apaired(ours, reference, pairs)))
            print(f"  adk guarded {name}/plain: {figures[-1][2]}", file=sys.stderr, flush=True)
            inside[name] = await ameasure_inside(ours, reference, store, inside_runs)
        sqlite.close()
    return figures, inside


def measure(pairs: int, inside_runs: int | None = None) -> tuple[list[Figure], dict[str, Inside]]:
    """The figures, and for each store the store's time inside one guarded run."""
    return asyncio.run(ameasure(pairs, inside_runs or max(5, pairs // 3)))


def render(figures: list[Figure], inside: dict[str, Inside]) -> str:
    headers = ["case / reference", "store", f"ratio at K={K}: median (min-max)", "case ms", "plain ms"]
    headers += ["ms per call", "store ms inside", "pairs", "goal"]
    rows = []
    for case, store, r in figures:
        goal = GOALS.get(store) if case == "guarded" else None
        per_call = (r.case_s - r.reference_s) / (2 * K + 1) * 1e3  # K + 1 model calls, K tool calls
        rows.append(
            [
                f"{case} / plain",
                store,
                str(r),
                f"{r.case_s * 1e3:.2f}",
                f"{r.reference_s * 1e3:.2f}",
                f"{per_call:+.3f}",
                f"{inside[store].seconds * 1e3:.2f}" if store in inside else "",
                r.pairs,
                goal_cell(r.median, goal) if goal is not None else "",
            ]
        )
    return table(headers, rows)


def goal_rows(figures: list[Figure], inside: dict[str, Inside]) -> list[list[str]]:
    """One row per goal; a missed one with its floor: ADK's own cost of a plugin with the same callbacks (the
    pass-through's ratio) plus the store's time inside the run over the plain run."""
    through = next((r for case, _, r in figures if case == "pass-through"), None)
    rows = []
    for case, store, r in figures:
        goal = GOALS.get(store) if case == "guarded" else None
        if goal is None:
            continue
        met = r.median <= goal
        floor = ""
        if not met and through is not None and store in inside:
            held = inside[store]
            bound = through.median + held.seconds / r.reference_s
            rest = (r.case_s - r.reference_s * bound) * 1e3 / (2 * K + 1)
            floor = (
                f"floor {bound:.2f} = ADK's own cost of a pass-through plugin with the same callbacks "
                f"({through.median:.3f}) + the store inside the run ({held.seconds * 1e3:.2f} ms of a "
                f"{r.reference_s * 1e3:.1f} ms plain run: {held.top()}); the plugin, guarded run and engine add "
                f"{rest:+.3f} ms per call over it"
            )
        rows.append([f"adk, {store}, K={K}: guarded / plain <= {goal:.2f}", str(r), "met" if met else "missed", floor])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=None, help="pairs per figure (default 21, quick 5)")
    parser.add_argument("--quick", action="store_true", help="5 pairs per figure")
    args = parser.parse_args()
    pairs = args.pairs or (5 if args.quick else 21)
    print(", ".join(f"{k}: {v}" for k, v in machine().items()), file=sys.stderr)
    figures, inside = measure(pairs)
    print(render(figures, inside))
    print()
    print(table(["goal", "measured", "", "floor that stops it"], goal_rows(figures, inside)))


if __name__ == "__main__":
    main()
