"""One OS process of the ADK approval tests (tests/test_adk_approvals.py): ``pause`` starts the session's task and
stops at ADK's tool confirmation; ``answer`` answers the last confirmation of the session (confirmed or not).
The model proposes ``refund(order=42)`` until it reads the refund's result, then answers. Each refund body run
appends a line to the journal; the outcome is printed as JSON.

``"script": "busy"``: the model first looks order 1 up, then proposes the refund, and after the refund's result
keeps looking further orders up (it never answers; the refund's verify says committed, not done): what only a
limit ends. ``"guarded": false`` runs the same agent under ADK alone (its ``Runner``, its ``FunctionTool``, its
``RunConfig(max_llm_calls=...)``), without the plugin. Each process also prints how many LLM calls it made
(``requests``)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from agents_loopguard import Budget
from agents_loopguard.adk import guarded_tool, run_guarded
from agents_loopguard.adk.claims import CONFIRMATION
from agents_loopguard.adk.testing import ScriptedLlm, calls, text
from agents_loopguard.store import SQLStore


def model_turn(request: LlmRequest) -> Any:
    for content in request.contents:
        for part in content.parts or []:
            response = part.function_response
            if response is not None and response.name == "refund" and "result" in (response.response or {}):
                return text("Refunded.")
    return calls(("refund", {"order": 42}))


def results(request: LlmRequest, name: str) -> int:
    """How many results of tool ``name`` the request carries."""
    return sum(
        1
        for content in request.contents
        for part in content.parts or []
        if part.function_response is not None
        and part.function_response.name == name
        and "result" in (part.function_response.response or {})
    )


def busy_turn(request: LlmRequest) -> Any:
    """Look order 1 up, propose the refund, then look order 2, 3, ... up (never an answer)."""
    looked, refunded = results(request, "lookup"), results(request, "refund")
    if looked and not refunded:
        return calls(("refund", {"order": 42}))
    return calls(("lookup", {"order": looked + 1}))


def agent(journal: Path, cfg: dict[str, Any]) -> tuple[LlmAgent, ScriptedLlm]:
    def refund(order: int) -> str:
        """Refund an order."""
        with journal.open("a") as out:
            out.write(f"refund-{order}\n")
        return f"refunded {order}"

    def lookup(order: int) -> str:
        """Look an order up."""
        return f"order {order} shipped"

    busy = cfg.get("script") == "busy"
    model = ScriptedLlm([busy_turn if busy else model_turn] * 20)
    if not cfg.get("guarded", True):  # ADK alone: its own FunctionTool, no guard declaration
        tools: list[Any] = [FunctionTool(refund, require_confirmation=True), FunctionTool(lookup)]
        return LlmAgent(name="clerk", model=model, tools=tools), model
    done = not busy  # busy: the refund commits without finishing the task
    refund_tool = guarded_tool(
        refund,
        kind="write",
        operation_id=lambda a: f"refund-{a['order']}",
        verify=lambda a, out: {"revision": 1, "done": done, "effect": "committed"},
        require_confirmation=True,
    )
    lookup_tool = guarded_tool(lookup, verify=lambda a, out: {"revision": a["order"], "done": False, "effect": "none"})
    return LlmAgent(name="clerk", model=model, tools=[refund_tool, lookup_tool]), model


async def adk_alone(
    built: LlmAgent, model: ScriptedLlm, message: Any, service: Any, cfg: dict[str, Any]
) -> dict[str, Any]:
    """The same step under ADK alone: its Runner with ``RunConfig(max_llm_calls=...)``, no plugin."""
    runner = Runner(app=App(name="shop", root_agent=built), session_service=service)
    session = await service.get_session(app_name="shop", user_id="u", session_id=cfg["session"])
    if session is None:
        session = await service.create_session(app_name="shop", user_id="u", session_id=cfg["session"])
    run_config = RunConfig(max_llm_calls=cfg["max_llm_calls"])
    error = None
    try:
        async for _event in runner.run_async(
            user_id="u", session_id=session.id, new_message=as_content(message), run_config=run_config
        ):
            pass
    except LlmCallsLimitExceededError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return {"requests": len(model.requests), "error": error}


def as_content(message: Any) -> types.Content:
    if isinstance(message, types.Content):
        return message
    return types.Content(role="user", parts=[types.Part(text=message)])


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{cfg['sessions']}")
    budget = Budget(model_turns=cfg.get("model_turns", 6), tool_executions=cfg.get("tool_executions", 4))
    journal = Path(cfg["journal"])
    message: Any = "Refund order 42."
    if cfg["step"] == "answer":
        session = await service.get_session(app_name="shop", user_id="u", session_id=cfg["session"])
        assert session is not None
        asked = [c.id for e in session.events for c in e.get_function_calls() if c.name == CONFIRMATION]
        answer = types.FunctionResponse(id=asked[-1], name=CONFIRMATION, response={"confirmed": cfg["confirmed"]})
        message = types.Content(role="user", parts=[types.Part(function_response=answer)])
    built, model = agent(journal, cfg)
    if not cfg.get("guarded", True):
        return await adk_alone(built, model, message, service, cfg)
    store = SQLStore(cfg["store"])
    try:
        outcome = await run_guarded(
            built,
            message,
            session_id=cfg["session"],
            user_id="u",
            app_name="shop",
            session_service=service,
            budget=budget,
            store=store,
        )
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        store.close()
    return {
        "status": str(outcome.status),
        "reason": str(outcome.reason),
        "models": outcome.used.models,
        "tools": outcome.used.tools,
        "pause_id": outcome.pause_id,
        "requests": len(model.requests),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
