"""A LangChain v1 agent (``create_agent``) guarded by ``LoopGuardMiddleware``: a search loop cut at its third
identical call, then a refund approved through LangChain's own ``HumanInTheLoopMiddleware`` and
``Command(resume=...)``, resumed once with the task's counters going on.

Without ``OPENAI_API_KEY`` it runs against the scripted OpenAI-compatible server from ``tests/support`` over real
HTTP (``ChatOpenAI(base_url=...)``; no network, no key). With ``OPENAI_API_KEY`` set it asks the real API
(``OPENAI_MODEL``, default gpt-4o-mini) with the same tools and budgets.

    python examples/langchain_refund_approval.py
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scripted server lives in tests/support; the package may not be installed

from langchain.agents import create_agent  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import Command  # noqa: E402

from agents_loopguard import Budget  # noqa: E402
from agents_loopguard.langchain import LoopGuardMiddleware  # noqa: E402
from agents_loopguard.run import declare_tool  # noqa: E402
from agents_loopguard.store import SQLStore  # noqa: E402

refunds: dict[int, str] = {}


@tool
def search_policy(query: str) -> str:
    """Search the refund policy."""
    return "Refunds are allowed within 30 days."


@tool
def refund(order: int) -> str:
    """Refund an order."""
    refunds[order] = "refunded"
    return f"order {order} refunded"


def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
    """The application's check: the payment system says whether the refund happened."""
    done = refunds.get(args["order"]) == "refunded"
    return {"revision": 1, "done": done, "effect": "committed" if done else "not_committed"}


TOOLS = {
    "search_policy": declare_tool("search_policy"),  # a read: its calls count, identical ones are cut
    "refund": declare_tool("refund", kind="write", operation_id=lambda a: f"refund-{a['order']}", verify=refunded),
}


@contextlib.contextmanager
def chat_model(steps: list[Any]) -> Iterator[ChatOpenAI]:
    if os.environ.get("OPENAI_API_KEY"):
        yield ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), max_tokens=400)
        return
    from tests.support.scripted_openai import ScriptedOpenAIServer

    with ScriptedOpenAIServer(steps) as server:
        yield ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="scripted", max_tokens=400)


def main() -> None:
    from tests.support.scripted_openai import final_text, tool_call

    store = SQLStore(f"sqlite:///{tempfile.mkdtemp()}/loopguard.db")
    looping = [tool_call("search_policy", {"query": "refund"}) for _ in range(6)]
    with chat_model(looping) as model:
        guard = LoopGuardMiddleware(budget=Budget(model_turns=8, tool_executions=6), store=store, tools=TOOLS)
        agent = create_agent(model, tools=[search_policy, refund], middleware=[guard])
        result = agent.invoke({"messages": [{"role": "user", "content": "Can I get a refund?"}]})
        outcome = guard.outcome(result)
        assert outcome is not None
        print(f"search loop: {outcome.status}/{outcome.reason} after {outcome.used.models} model turns")

    script = [tool_call("refund", {"order": 42}), final_text("Order 42 is refunded.")]
    with chat_model(script) as model:
        guard = LoopGuardMiddleware(budget=Budget(model_turns=6, tool_executions=4), store=store, tools=TOOLS)
        middleware = [guard, guard.human_in_the_loop({"refund": True})]
        agent = create_agent(model, tools=[refund], middleware=middleware, checkpointer=InMemorySaver())
        thread = {"configurable": {"thread_id": "refund-42"}}  # the LangGraph thread is the guard's task
        paused = agent.invoke({"messages": [{"role": "user", "content": "Refund order 42."}]}, thread)
        waiting = guard.outcome(paused)
        assert waiting is not None
        print(f"paused: {waiting.status}/{waiting.reason}, pause {waiting.pause_id is not None}")
        resumed = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), thread)
        outcome = guard.outcome(resumed)
        assert outcome is not None
        print(f"resumed: {outcome.status}/{outcome.reason}, models {outcome.used.models}, tools {outcome.used.tools}")
    print(f"refunds: {refunds}")
    store.close()


if __name__ == "__main__":
    main()
