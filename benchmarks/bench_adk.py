"""What the Google ADK plugin adds to a whole ADK run: guarded / plain wall-clock ratio, same agent, same scripted
model (``agents_loopguard.adk.testing.ScriptedLlm``, in process: the figure is the plugin's cost, not a network's).

Run: ``python benchmarks/bench_adk.py`` (``--quick`` for a short run, ``--pairs N`` to choose the pairs).

An ``LlmAgent`` makes K = 10 tool calls, one per model turn (each call makes verified progress, so the guard lets
all of them run), then answers. Plain: ``Runner.run_async`` of an ``App`` without plugins; guarded:
:func:`agents_loopguard.adk.run_guarded` (the same runner with the ``LoopGuardPlugin``). Stores: the MemoryStore and
SQLStore on a SQLite file. Each figure is the median (min-max) of interleaved pairs' ratios (``paired.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from paired import Ratio, goal_cell, machine, run_paired_async, table

from agents_loopguard import Budget, MemoryStore, Store
from agents_loopguard.adk import guarded_tool, run_guarded
from agents_loopguard.adk.testing import ScriptedLlm, calls, text
from agents_loopguard.store.sql import SQLStore

GOALS = {"memory": 1.05, "sqlite": 1.15}  # issue 19: the guarded ADK run may cost this much at K = 10


def lookup(n: int) -> str:
    """Look record n up."""
    return f"record {n}"


def verify(args: Any, output: Any) -> dict[str, Any]:
    return {"revision": int(args["n"]) + 1, "done": False, "effect": "none"}


def model(turns: int) -> ScriptedLlm:
    return ScriptedLlm([*(calls(("lookup", {"n": i})) for i in range(turns)), text("done")])


def plain(turns: int) -> Any:
    async def go() -> None:
        agent = LlmAgent(name="clerk", model=model(turns), tools=[lookup])
        runner = Runner(app=App(name="bench", root_agent=agent), session_service=InMemorySessionService())
        session = await runner.session_service.create_session(app_name="bench", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text="go")])
        async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass

    return go


def guarded(turns: int, store: Store) -> Any:
    tool = guarded_tool(lookup, verify=verify)

    async def go() -> None:
        agent = LlmAgent(name="clerk", model=model(turns), tools=[tool])
        budget = Budget(model_turns=turns + 2, tool_executions=turns + 1)
        outcome = await run_guarded(agent, "go", budget=budget, store=store, task_id=f"bench-{uuid.uuid4().hex}")
        assert outcome.used.tools == turns, outcome

    return go


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="4 pairs per figure")
    args = parser.parse_args()
    pairs = 4 if args.quick else args.pairs
    turns = 10
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        sqlite = SQLStore(f"sqlite:///{Path(workdir) / 'bench.db'}")
        for name, store in (("memory", MemoryStore()), ("sqlite", sqlite)):
            ratio: Ratio = run_paired_async(guarded(turns, store), plain(turns), pairs)
            per_call_ms = (ratio.case_s - ratio.reference_s) / (2 * turns + 1) * 1000
            rows.append(
                ["adk", name, turns, str(ratio), f"{per_call_ms:.2f}", goal_cell(ratio.median, GOALS[name]), pairs]
            )
        sqlite.close()
    print(table(["adapter", "store", "K", "guarded/plain", "ms per call", "goal", "pairs"], rows))
    print({k: v for k, v in machine().items() if k in ("cpu", "cores", "python")})


if __name__ == "__main__":
    main()
