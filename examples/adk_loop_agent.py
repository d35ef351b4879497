"""A Google ADK LoopAgent around a model stuck on one search, under the guard (no API key: a scripted model).

Without the guard ADK's LoopAgent has no bound of its own here (its ``max_iterations`` defaults to none) and the
stuck model keeps its first iteration going until ``RunConfig.max_llm_calls`` (500, per invocation). With the
LoopGuardPlugin the third identical search is refused before it runs (the second found nothing new), the invocation
ends, and the task's outcome says why.

Run it: ``python examples/adk_loop_agent.py``
"""

from __future__ import annotations

import asyncio

from google.adk.agents import LlmAgent, LoopAgent

from agents_loopguard import Budget, MemoryStore
from agents_loopguard.adk import guarded_tool, run_guarded
from agents_loopguard.adk.testing import ScriptedLlm, calls

found: set[str] = set()


def new_documents(args: dict, hits: list[str]) -> dict:
    """The application's check: progress is the number of distinct documents found."""
    found.update(hits)
    return {"revision": len(found), "done": False, "effect": "none"}


def search_docs(query: str) -> list[str]:
    """Search the policy documents."""
    executed.append(query)
    return ["doc-14 Refunds within 30 days"]


executed: list[str] = []


async def main() -> None:
    stuck = ScriptedLlm([calls(("search_docs", {"query": "refund policy"})) for _ in range(50)])
    searcher = LlmAgent(name="searcher", model=stuck, tools=[guarded_tool(search_docs, verify=new_documents)])
    loop = LoopAgent(name="research", sub_agents=[searcher])  # no max_iterations: ADK would not stop it
    outcome = await run_guarded(
        loop, "What is our refund policy?", budget=Budget(model_turns=20, tool_executions=10), store=MemoryStore()
    )
    print(f"outcome: {outcome.status}/{outcome.reason}")
    print(f"detail: {outcome.detail}")
    print(f"model calls: {outcome.used.models} (the model was asked {len(stuck.requests)} times)")
    print(f"searches executed: {len(executed)}")
    print(f"kept: {outcome.value}")


if __name__ == "__main__":
    asyncio.run(main())
