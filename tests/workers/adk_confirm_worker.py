"""One OS process of the ADK approval tests (tests/test_adk_approvals.py): ``pause`` starts the session's task and
stops at ADK's tool confirmation; ``answer`` answers the last confirmation of the session (confirmed or not).
The model proposes ``refund(order=42)`` until it reads the refund's result, then answers. Each refund body run
appends a line to the journal; the outcome is printed as JSON."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.sessions import DatabaseSessionService
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


def agent(journal: Path) -> LlmAgent:
    def refund(order: int) -> str:
        """Refund an order."""
        with journal.open("a") as out:
            out.write(f"refund-{order}\n")
        return f"refunded {order}"

    tool = guarded_tool(
        refund,
        kind="write",
        operation_id=lambda a: f"refund-{a['order']}",
        verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
        require_confirmation=True,
    )
    return LlmAgent(name="clerk", model=ScriptedLlm([model_turn] * 20), tools=[tool])


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{cfg['sessions']}")
    store = SQLStore(cfg["store"])
    budget = Budget(model_turns=cfg.get("model_turns", 6), tool_executions=4)
    journal = Path(cfg["journal"])
    message: Any = "Refund order 42."
    if cfg["step"] == "answer":
        session = await service.get_session(app_name="shop", user_id="u", session_id=cfg["session"])
        assert session is not None
        asked = [c.id for e in session.events for c in e.get_function_calls() if c.name == CONFIRMATION]
        answer = types.FunctionResponse(id=asked[-1], name=CONFIRMATION, response={"confirmed": cfg["confirmed"]})
        message = types.Content(role="user", parts=[types.Part(function_response=answer)])
    try:
        outcome = await run_guarded(
            agent(journal),
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
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
