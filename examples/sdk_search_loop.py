"""An Agents SDK agent loops on a search tool; the guard cuts the loop before execution and keeps what was verified.

No API key: the model is ``agents.testing.ScriptedModel``, scripted to behave like a model caught in a loop (it
keeps rephrasing the same search). The application's ``verify`` says what counts as progress: new documents found.

Run: ``python examples/sdk_search_loop.py``
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, MemoryStore
from agents_loopguard.sdk import guarded_tool, run_guarded

CATALOGUE = {
    "refund policy": ["doc-14 Refunds within 30 days", "doc-22 Refunds for digital goods"],
    "refund policy 2024": ["doc-14 Refunds within 30 days"],
    "refund policy eu": ["doc-22 Refunds for digital goods"],
}
found: dict[str, str] = {}  # the application's own record of what the search has established
searches: list[str] = []


def new_documents(args: dict[str, Any], hits: list[str]) -> dict[str, Any]:
    """Trusted check: the revision is the number of distinct documents found so far (it never goes back)."""
    for hit in hits:
        found.setdefault(hit.split()[0], hit)
    return {"revision": len(found), "done": False, "effect": "none"}


@guarded_tool(verify=new_documents)
def search_docs(query: str) -> list[str]:
    """Search the policy documents."""
    searches.append(query)
    return CATALOGUE.get(query.lower(), [])


def looping_model() -> ScriptedModel:
    queries = ["refund policy", "refund policy", "refund policy 2024", "refund policy EU", "refund policy"] * 2
    turns: list[Any] = [
        [function_call("search_docs", {"query": q}, call_id=f"call_{i}")] for i, q in enumerate(queries)
    ]
    return ScriptedModel([*turns, [assistant_message("Refunds are possible within 30 days.")]])


async def main() -> None:
    set_tracing_disabled(True)
    store = MemoryStore()
    agent = Agent(
        name="support", instructions="Answer from the policy documents.", model=looping_model(), tools=[search_docs]
    )
    outcome = await run_guarded(
        agent,
        "What is our refund policy?",
        budget=Budget(model_turns=12, tool_executions=8),
        store=store,
        task_id="ticket-1042",
    )
    print(f"outcome: {outcome.status}/{outcome.reason} - {outcome.detail}")
    print(f"  searches executed: {len(searches)} ({', '.join(searches)}); model turns: {outcome.used.models}")
    print(f"  kept what was verified: revision {outcome.revision}, documents {sorted(found)}")
    print(f"  last verified tool output: {outcome.value}")
    print("  recovery record:", json.dumps(outcome.record().to_dict(), indent=2).replace("\n", "\n  "))


if __name__ == "__main__":
    asyncio.run(main())
