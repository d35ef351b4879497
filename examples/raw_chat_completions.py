"""A guarded Chat Completions tool loop with the plain ``openai`` client: look an order up, confirm it once, stop.

Without ``OPENAI_API_KEY`` it runs against the scripted OpenAI-compatible server from ``tests/support`` (no network,
no key): the first request fails with a 500 and is retried by the loop (a second reserved model turn), the model
looks the order up, confirms it (a write with a stable operation id, verified against the fake receiver), and the
application validates the task as done. The request after that goes out with ``tool_choice="none"``: nothing forces
a tool any more, and the model's final answer ends the run. With ``OPENAI_API_KEY`` set it asks the real API
(``OPENAI_MODEL``, default gpt-4o-mini) with the same tools, budget and illustrative prices.

    python examples/raw_chat_completions.py
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scripted server lives in tests/support; the package may not be installed

import openai  # noqa: E402

from agents_loopguard import Budget, MemoryStore  # noqa: E402
from agents_loopguard.function_calling import GuardedTool, run_chat_completions  # noqa: E402
from agents_loopguard.values.pricing import Price  # noqa: E402

PRICES = {"gpt-4o-mini": Price(input_per_million=0.15, output_per_million=0.60)}
"""Illustrative, in US dollars: check the current price list before you rely on a cost budget."""


class OrderDesk:
    """The receiving system: orders and a record of every confirmation by its operation id."""

    def __init__(self) -> None:
        self.orders = {42: {"version": 3, "status": "open", "total": "19.90 EUR"}}
        self.confirmations: dict[str, dict[str, Any]] = {}

    def lookup_order(self, order_id: int) -> dict[str, Any]:
        order = self.orders.get(order_id)
        return {"order_id": order_id, "found": order is not None, **(order or {})}

    def confirm_order(self, order_id: int, version: int) -> dict[str, Any]:
        receipt = {"receipt": f"rcpt-{order_id}-{version}", "order_id": order_id}
        self.confirmations[confirmation_id({"order_id": order_id, "version": version})] = receipt
        self.orders[order_id]["status"] = "confirmed"
        return receipt


def confirmation_id(args: Any) -> str:
    """The business action, stable across retries and model turns: confirm order N at version V."""
    return f"confirm-order-{args['order_id']}-v{args['version']}"


def tools(desk: OrderDesk) -> list[GuardedTool]:
    order_id = {"type": "integer", "description": "The order number."}
    return [
        GuardedTool(
            "lookup_order",
            desk.lookup_order,
            description="Look an order up by its number.",
            parameters={"type": "object", "properties": {"order_id": order_id}, "required": ["order_id"]},
            # a lookup that found the order is a new fact (revision 1); one that did not proves nothing
            verify=lambda args, out: {"revision": 1 if out["found"] else 0, "done": False, "effect": "none"},
        ),
        GuardedTool(
            "confirm_order",
            desk.confirm_order,
            description="Confirm an order at the version you looked up.",
            parameters={
                "type": "object",
                "properties": {"order_id": order_id, "version": {"type": "integer"}},
                "required": ["order_id", "version"],
            },
            kind="write",
            operation_id=confirmation_id,
            # trusted check: ask the receiver, by the stable id, whether the confirmation exists
            verify=lambda args, out: {
                "revision": 2 if confirmation_id(args) in desk.confirmations else 1,
                "done": confirmation_id(args) in desk.confirmations,
                "effect": "committed" if confirmation_id(args) in desk.confirmations else "not_committed",
            },
        ),
    ]


@contextlib.contextmanager
def model_client() -> Iterator[tuple[openai.OpenAI, str, Any]]:
    """The real API when OPENAI_API_KEY is set, else the scripted server (yields client, model, server)."""
    if os.environ.get("OPENAI_API_KEY"):
        with openai.OpenAI() as client:
            yield client, os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), None
        return
    from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, http_error, tool_call

    script = [
        http_error(500, retry_after_ms=1),
        tool_call("lookup_order", {"order_id": 42}),
        tool_call("confirm_order", {"order_id": 42, "version": 3}),
        final_text("Order 42 is confirmed (receipt rcpt-42-3)."),
    ]
    with ScriptedOpenAIServer(script) as server, openai.OpenAI(base_url=server.base_url, api_key="test") as client:
        yield client, "gpt-4o-mini", server


def main() -> int:
    desk, store = OrderDesk(), MemoryStore()
    with model_client() as (client, model, server):
        outcome = run_chat_completions(
            client,
            model=model,
            messages=[
                {"role": "system", "content": "You manage orders. Look an order up before confirming it."},
                {"role": "user", "content": "Please confirm order 42."},
            ],
            tools=tools(desk),
            tool_choice="required",
            budget=Budget(model_turns=6, tool_executions=4, cost=0.05),
            store=store,
            task_id="confirm-order-42",
            max_output_tokens=300,
            prices=PRICES if model in PRICES else None,
        )
        requests = server.requests if server else []

    print(f"outcome: {outcome.status}/{outcome.reason}: {outcome.detail}")
    print(f"final answer: {outcome.result.final_text!r}")
    used = outcome.used
    print(f"used: {used.models} model attempts, {used.tools} tool executions, cost {used.cost:.6f} USD")
    if server:
        print(f"requests the server received: {len(requests)}")
        print("tool_choice per request:", [r.body.get("tool_choice") for r in requests])
    print("ledger:", [(op.operation_id, str(op.state)) for op in store.operations()])
    print("trace:", [f"{e.kind}:{e.result_class}" for e in store.trace(outcome.task_id)])
    print("recovery record:", json.dumps(outcome.record().to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
