"""What the guard adds to a whole agent run: guarded / plain wall-clock ratio, same agent, same scripted model.

Run: ``python benchmarks/bench_sdk.py`` (``--quick`` for a short run, ``--pairs N`` to choose the pairs). With
``LOOPGUARD_TEST_POSTGRES_URL`` (or ``LOOPGUARD_BENCH_POSTGRES_URL``) set, the PostgreSQL store is measured too, in
a fresh schema dropped afterwards.

Two kinds of run, each an agent that makes K tool calls, one per model turn (each call makes verified progress, so
the guard lets all of them run), then answers:

- ``sdk``: the OpenAI Agents SDK with ``agents.testing.ScriptedModel``: ``run_guarded`` against a plain
  ``Runner.run``, K = 10 and K = 100;
- ``raw loop``: the real ``openai`` client over HTTP against the scripted server of ``tests/support``:
  ``agents_loopguard.function_calling.run_chat_completions`` against a hand-written Chat Completions loop, K = 10.

Stores: the in-process MemoryStore, SQLStore on a SQLite file (the default ``synchronous=WRITES``: fsync only for
the commits that protect writes and decisions) and on PostgreSQL. Each figure is the median, min and max of the
ratios of interleaved pairs (guarded and plain back to back, who goes first alternating); see ``paired.py``.

After the pairs of a figure, a few more guarded runs (each after a plain one, as in the pairs) time every call of
the store's public methods *inside* the run (``paired.StoreClock``): the median store time per guarded run, what
``report.py`` builds each floor from. The pairs themselves run unwrapped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import openai
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from paired import Ratio, astore_seconds, goal_cell, paired, pg_schema, run_paired_async, store_seconds, table

from agents_loopguard import Budget, MemoryStore, Store
from agents_loopguard.function_calling import GuardedTool, run_chat_completions
from agents_loopguard.sdk import guarded_tool, run_guarded
from agents_loopguard.store.sql import SQLStore
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, tool_call

# The scripted server sets TCP_NODELAY (its handler's disable_nagle_algorithm): otherwise the body of a response,
# written after its headers, would wait for the client's delayed ACK and hide the guard's cost under 40 ms a turn.

GOALS = {  # issue 13: (store, K) -> the ratio the guarded run may cost
    ("sdk", "memory", 10): 1.03,
    ("sdk", "memory", 100): 1.02,
    ("sdk", "sqlite", 10): 1.10,
    ("sdk", "sqlite", 100): 1.05,
    ("sdk", "postgresql", 10): 1.35,
    ("sdk", "postgresql", 100): 1.15,
    ("raw loop", "memory", 10): 1.03,
    ("raw loop", "sqlite", 10): 1.10,
}


def lookup(n: int) -> str:
    """Look up record n."""
    return f"record {n}: ok"


def verify(args: Any, output: Any) -> dict[str, Any]:
    return {"revision": int(args["n"]), "done": False, "effect": "none"}


PLAIN = function_tool(lookup)
GUARDED = guarded_tool(verify=verify)(lookup)


# --- the Agents SDK ------------------------------------------------------------------------------------------------


def model(turns: int) -> ScriptedModel:
    steps: list[Any] = [[function_call("lookup", {"n": i}, call_id=f"call_{i}")] for i in range(1, turns + 1)]
    return ScriptedModel([*steps, [assistant_message("done")]])


def sdk_plain(turns: int) -> Callable[[], Awaitable[Any]]:
    async def go() -> Any:
        agent = Agent(name="bench", model=model(turns), tools=[PLAIN])
        result = await Runner.run(agent, "go", max_turns=turns + 2)
        assert result.final_output == "done"

    return go


def sdk_guarded(turns: int, store: Store) -> Callable[[], Awaitable[Any]]:
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


# --- a raw Chat Completions loop -------------------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
SPEC = {"type": "function", "function": {"name": "lookup", "description": "Look up record n.", "parameters": SCHEMA}}
RAW_TOOL = GuardedTool("lookup", lookup, parameters=SCHEMA, verify=verify, description="Look up record n.")
MESSAGES = [{"role": "user", "content": "go"}]


def script(server: ScriptedOpenAIServer, turns: int) -> None:
    server.add(*(tool_call("lookup", {"n": i}, call_id=f"call_{i}") for i in range(1, turns + 1)), final_text("done"))


def raw_plain(client: openai.OpenAI, server: ScriptedOpenAIServer, turns: int) -> Callable[[], None]:
    """What an application writes without the guard: ask, run the tools called, feed the outputs back."""
    create = client.with_options(max_retries=0).chat.completions.create

    def go() -> None:
        script(server, turns)
        messages: list[Any] = list(MESSAGES)
        calls = 0
        for _ in range(turns + 2):
            message = create(model="gpt-4o-mini", messages=messages, tools=[SPEC]).choices[0].message  # type: ignore[list-item]
            if not message.tool_calls:
                break
            messages.append(message.model_dump(exclude_none=True))
            for tc in message.tool_calls:
                output = lookup(**json.loads(tc.function.arguments))  # type: ignore[union-attr]
                calls += 1
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": output})
        assert message.content == "done" and calls == turns

    return go


def raw_guarded(client: openai.OpenAI, server: ScriptedOpenAIServer, turns: int, store: Store) -> Callable[[], None]:
    budget = Budget(model_turns=turns + 1, tool_executions=turns)

    def go() -> None:
        script(server, turns)
        outcome = run_chat_completions(
            client,
            model="gpt-4o-mini",
            messages=MESSAGES,
            tools=[RAW_TOOL],
            budget=budget,
            store=store,
            task_id=f"bench-{uuid.uuid4().hex}",
            verify_output=lambda text: text == "done",
        )
        assert outcome.done and outcome.used.tools == turns, outcome

    return go


# --- the run ----------------------------------------------------------------------------------------------------------

Figure = tuple[str, str, int, Ratio]
"""(run, store, K, the guarded / plain ratio)."""


@contextmanager
def stores(workdir: str, with_pg: bool = True) -> Iterator[dict[str, Store]]:
    with ExitStack() as stack:
        found: dict[str, Store] = {"memory": MemoryStore()}
        found["sqlite"] = stack.enter_context(SQLStore(f"sqlite:///{workdir}/writes.db"))  # default: WRITES
        pg = stack.enter_context(pg_schema()) if with_pg else None
        if pg is not None:
            found["postgresql"] = stack.enter_context(SQLStore(pg[0]))
        yield found


def measure(
    pairs: int, long_pairs: int, *, only: set[str] | None = None
) -> tuple[list[Figure], dict[tuple[str, str, int], float]]:
    """The figures, and for each the median seconds the store took inside one guarded run."""
    set_tracing_disabled(True)
    workdir = tempfile.mkdtemp(prefix="bench-sdk-")
    figures: list[Figure] = []
    inside: dict[tuple[str, str, int], float] = {}
    with stores(workdir) as found, ScriptedOpenAIServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="bench")
        for turns in (10, 100):
            for name, store in found.items():
                if only and name not in only:
                    continue
                n = pairs if turns == 10 else long_pairs
                ratio = run_paired_async(sdk_guarded(turns, store), sdk_plain(turns), n)
                figures.append(("sdk", name, turns, ratio))
                timing = astore_seconds(sdk_guarded(turns, store), sdk_plain(turns), store, max(3, n // 3))
                inside["sdk", name, turns] = asyncio.run(timing)
                print(f"  sdk K={turns} {name}: {ratio}", file=sys.stderr, flush=True)
        for name, store in found.items():
            if only and name not in only:
                continue
            guarded, plain = raw_guarded(client, server, 10, store), raw_plain(client, server, 10)
            ratio = paired(guarded, plain, pairs)
            figures.append(("raw loop", name, 10, ratio))
            inside["raw loop", name, 10] = store_seconds(guarded, plain, store, max(3, pairs // 3))
            print(f"  raw loop K=10 {name}: {ratio}", file=sys.stderr, flush=True)
        client.close()
    return figures, inside


def render(figures: list[Figure], inside: dict[tuple[str, str, int], float]) -> str:
    rows = []
    for run, name, turns, r in figures:
        goal = GOALS.get((run, name, turns))
        added = (r.case_s - r.reference_s) * 1000 / turns
        rows.append(
            [
                run,
                name,
                turns,
                f"{r.reference_s * 1000:.1f}",
                f"{r.case_s * 1000:.1f}",
                f"{added:+.3f}",
                f"{inside.get((run, name, turns), 0.0) * 1000 / turns:.3f}",
                f"{r.median:.3f}",
                f"{r.low:.2f}-{r.high:.2f}",
                r.pairs,
                goal_cell(r.median, goal) if goal is not None else "",
            ]
        )
    headers = [
        "run",
        "store",
        "K",
        "plain ms",
        "guarded ms",
        "ms/turn",
        "store ms/turn",
        "ratio",
        "min-max",
        "pairs",
        "goal",
    ]
    return table(headers, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer pairs")
    parser.add_argument("--pairs", type=int, default=None, help="pairs per figure at K=10 (default 21, quick 7)")
    parser.add_argument("--store", action="append", help="only this store (memory, sqlite, postgresql); repeatable")
    args = parser.parse_args()
    pairs = args.pairs or (7 if args.quick else 21)
    figures, inside = measure(pairs, max(5, pairs // 2), only=set(args.store) if args.store else None)
    print(render(figures, inside))


if __name__ == "__main__":
    main()
