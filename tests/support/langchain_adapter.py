"""The LangChain side of the run-rule matrix (tests/support/adapters.py): a scenario through ``create_agent`` with
``LoopGuardMiddleware``, ``ChatOpenAI`` talking to the scripted server over real HTTP (the real openai client),
invoked synchronously (``invoke``) or on an event loop (``ainvoke``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI

from agents_loopguard import Outcome
from agents_loopguard.langchain import LoopGuardMiddleware
from agents_loopguard.run import declare_tool
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.shop import MODEL
from tests.support.wire import async_http_client, http_client, tool_outputs

__all__ = ["run_langchain"]


def _declared(tools: Sequence[Any]) -> dict[str, Any]:
    return {t.name: declare_tool(t.name, **t.declaration()) for t in tools}


def run_langchain(
    asynchronous: bool,
    steps: Sequence[Any],
    tools: Sequence[Any],
    tool_choice: Any,
    reset_forced_function: bool,
    max_output_tokens: int | None,
    options: dict[str, Any],
) -> tuple[Outcome, list[Any], list[dict[str, str]]]:
    """Run the scenario; return the outcome, the ``tool_choice`` of each request and the tool outputs each carried."""
    from tests.support.adapters import _raw_step, _wire_choice

    script = [_raw_step(turn, step) for turn, step in enumerate(steps, start=1)]
    with ScriptedOpenAIServer(script) as server:
        model = ChatOpenAI(
            model=MODEL,
            base_url=server.base_url,
            api_key="test",
            max_retries=0,
            max_tokens=max_output_tokens,
            http_client=http_client(),
            http_async_client=async_http_client(),
        )
        guard = LoopGuardMiddleware(
            tools=_declared(tools),
            tool_choice=_wire_choice("chat", tool_choice),
            reset_forced_function=reset_forced_function,
            **options,
        )
        agent = create_agent(model, tools=[langchain_tool(t.fn) for t in tools], middleware=[guard])
        request = {"messages": [{"role": "user", "content": "go"}]}
        config = {"recursion_limit": 200}
        if asynchronous:

            async def main() -> Any:
                return await agent.ainvoke(request, config)

            result = asyncio.run(main())
        else:
            result = agent.invoke(request, config)
        outcome = guard.outcome(result)
        assert outcome is not None, "the run ended without an outcome"
        requests = server.requests
    return outcome, [r.body.get("tool_choice") for r in requests], [tool_outputs("chat", r.body) for r in requests]
