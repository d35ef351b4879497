"""A guarded Responses API loop with ``openai.AsyncOpenAI``: a model that keeps asking the same thing is cut off.

Without ``OPENAI_API_KEY`` it runs against the scripted OpenAI-compatible server from ``tests/support``: the first
request stalls past the client's timeout and the loop retries it (each attempt is a reserved model turn); then the
model looks the same shipment up again and again. The first lookup brings a new fact, the second none, and before
the third execution of the same call the guard refuses it: ``stopped/same_call``,
with the verified lookup kept as the outcome's value. With ``OPENAI_API_KEY`` set it asks the real API
(``OPENAI_MODEL``, default gpt-4o-mini), which will most likely answer after one lookup (``partial``: the
application never validated the task as done).

    python examples/raw_responses.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scripted server lives in tests/support; the package may not be installed

import openai  # noqa: E402

from agents_loopguard import Budget, MemoryStore  # noqa: E402
from agents_loopguard.function_calling import GuardedTool, RetryPolicy, arun_responses  # noqa: E402

SHIPMENTS = {"SHP-7": {"carrier": "DHL", "status": "in transit", "eta": "tomorrow"}}
facts: set[str] = set()


async def track_shipment(shipment_id: str) -> dict[str, Any]:
    """The carrier's tracking API (a fake one)."""
    await asyncio.sleep(0)
    return {"shipment_id": shipment_id, **SHIPMENTS.get(shipment_id, {"status": "unknown"})}


def verify_tracking(args: Any, output: Any) -> dict[str, Any]:
    """Progress is a new fact about a shipment, not another answer saying the same thing."""
    facts.add(f"{output['shipment_id']}:{output['status']}")
    return {"revision": len(facts), "done": False, "effect": "none"}


TRACK = GuardedTool(
    "track_shipment",
    track_shipment,
    description="Where is a shipment?",
    parameters={"type": "object", "properties": {"shipment_id": {"type": "string"}}, "required": ["shipment_id"]},
    verify=verify_tracking,
    retry=RetryPolicy(max_retries=1, initial_delay=0.1),  # a tracking read may be retried once on a timeout
)


@contextlib.asynccontextmanager
async def model_client() -> AsyncIterator[tuple[openai.AsyncOpenAI, str, Any]]:
    """The real API when OPENAI_API_KEY is set, else the scripted server (yields client, model, server)."""
    if os.environ.get("OPENAI_API_KEY"):
        async with openai.AsyncOpenAI() as client:
            yield client, os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), None
        return
    from tests.support.scripted_openai import ScriptedOpenAIServer, stall, tool_call

    script = [stall(30)] + [tool_call("track_shipment", {"shipment_id": "SHP-7"}) for _ in range(5)]
    with ScriptedOpenAIServer(script) as server:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", timeout=1.0) as client:
            yield client, "gpt-4o-mini", server


async def main() -> int:
    store = MemoryStore()
    async with model_client() as (client, model, server):
        outcome = await arun_responses(
            client,
            model=model,
            instructions="You track shipments with the track_shipment tool.",
            input="Where is shipment SHP-7?",
            tools=[TRACK],
            budget=Budget(model_turns=8, tool_executions=6),
            store=store,
            task_id="track-SHP-7",
        )
        requests = server.requests if server else []

    print(f"outcome: {outcome.status}/{outcome.reason}: {outcome.detail}")
    print(f"last verified result: {outcome.value}")
    print(f"used: {outcome.used.models} model attempts, {outcome.used.tools} tool executions")
    if server:
        print(f"requests the server received: {len(requests)} (the first one stalled and timed out)")
    print("trace:", [f"{e.kind}:{e.result_class}" for e in store.trace(outcome.task_id)])
    print("recovery record:", json.dumps(outcome.record().to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
