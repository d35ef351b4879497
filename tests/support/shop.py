"""The raw function-calling loop's test harness: a fake shop (the receiving system behind the tools) and
:func:`run_loop`, which runs a loop of either API, sync or async, with the real openai client against the scripted
server."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import openai

from agents_loopguard import Outcome
from agents_loopguard.function_calling import (
    GuardedTool,
    RetryPolicy,
    arun_chat_completions,
    arun_responses,
    run_chat_completions,
    run_responses,
)
from tests.support.scripted_openai import ScriptedOpenAIServer

__all__ = ["COMBOS", "CONFIRM_42", "MODEL", "Shop", "proposed_ids", "run_loop"]

MODEL = "gpt-4o-mini"
COMBOS = [("chat", "sync"), ("chat", "async"), ("responses", "sync"), ("responses", "async")]
CONFIRM_42 = {"order_id": 42, "version": 3}


class Shop:
    """A fake receiving system with an order lookup (read) and an order confirmation (write).

    ``faults[tool]`` is a list of ``(when, exception)`` consumed one per attempt: ``before`` raises without any
    effect, ``after`` commits the write and then raises (the answer was lost). ``None`` entries succeed.
    """

    def __init__(self, *, done_on_confirm: bool = True) -> None:
        self.orders: dict[int, dict[str, Any]] = {
            42: {"version": 3, "status": "open"},
            7: {"version": 1, "status": "open"},
        }
        self.receipts: dict[str, dict[str, Any]] = {}
        self.executions: list[tuple[str, dict[str, Any]]] = []
        self.reruns_after_commit: list[str] = []
        self.faults: dict[str, list[tuple[str, BaseException] | None]] = {}
        self.facts: set[str] = set()
        self.done_on_confirm = done_on_confirm
        self.done_reported = False

    def _fault(self, tool: str) -> tuple[str, BaseException] | None:
        queue = self.faults.get(tool) or []
        return queue.pop(0) if queue else None

    def lookup_order(self, order_id: int) -> dict[str, Any]:
        self.executions.append(("lookup_order", {"order_id": order_id}))
        fault = self._fault("lookup_order")
        if fault is not None:
            raise fault[1]
        order = self.orders.get(order_id)
        return {"order_id": order_id, "found": order is not None, **(order or {})}

    def confirm_order(self, order_id: int, version: int) -> dict[str, Any]:
        op = self.operation_id({"order_id": order_id, "version": version})
        self.executions.append(("confirm_order", {"order_id": order_id, "version": version}))
        if op in self.receipts:
            self.reruns_after_commit.append(op)
        fault = self._fault("confirm_order")
        if fault is not None and fault[0] == "before":
            raise fault[1]
        self.receipts[op] = {"receipt": f"r-{len(self.receipts) + 1}", "order_id": order_id, "version": version}
        if order_id in self.orders:
            self.orders[order_id]["status"] = "confirmed"
        if fault is not None:
            raise fault[1]
        return self.receipts[op]

    @staticmethod
    def operation_id(args: Any) -> str:
        return f"confirm-order-{args['order_id']}-v{args['version']}"

    def verify_lookup(self, args: Any, output: Any) -> dict[str, Any]:
        if output.get("found"):
            self.facts.add(f"order:{output['order_id']}:{output['status']}")
        return {"revision": len(self.facts), "done": False, "effect": "none"}

    def verify_confirm(self, args: Any, output: Any) -> dict[str, Any]:
        op = self.operation_id(args)  # ask the receiver by the stable id, whatever the attempt said
        committed = op in self.receipts
        if committed:
            self.facts.add(f"confirmed:{op}")
        done = committed and self.done_on_confirm
        self.done_reported = self.done_reported or done
        return {"revision": len(self.facts), "done": done, "effect": "committed" if committed else "not_committed"}

    def tools(self, retry: RetryPolicy | None = None) -> list[GuardedTool]:
        retry = retry or RetryPolicy()
        integer = {"type": "integer"}
        return [
            GuardedTool(
                "lookup_order",
                self.lookup_order,
                parameters={"type": "object", "properties": {"order_id": integer}, "required": ["order_id"]},
                verify=self.verify_lookup,
                description="Look an order up.",
                retry=retry,
                progress_key="facts",  # both verifies count the shop's facts for the whole task: one key
            ),
            GuardedTool(
                "confirm_order",
                self.confirm_order,
                parameters={"type": "object", "properties": {"order_id": integer, "version": integer}},
                kind="write",
                operation_id=self.operation_id,
                verify=self.verify_confirm,
                retry=retry,
                progress_key="facts",
            ),
        ]

    def count(self, tool: str) -> int:
        return sum(1 for name, _ in self.executions if name == tool)


def run_loop(
    server: ScriptedOpenAIServer,
    api: str,
    mode: str,
    *,
    tools: list[GuardedTool],
    client_options: dict[str, Any] | None = None,
    prompt: str = "Confirm order 42 at version 3.",
    sync_client: openai.OpenAI | None = None,
    **kwargs: Any,
) -> Outcome:
    """Run the loop of ``api`` (chat/responses) in ``mode`` (sync/async) with a real openai client.

    ``sync_client`` reuses one client's connection pool (pointed at ``server`` with ``with_options``)."""
    options = {"base_url": server.base_url, "api_key": "test", "max_retries": 2, **(client_options or {})}
    if api == "chat":
        kwargs["messages"] = [{"role": "user", "content": prompt}]
    else:
        kwargs["input"] = prompt
    if mode == "sync":
        with (
            contextlib.nullcontext(sync_client.with_options(base_url=server.base_url))
            if sync_client
            else (openai.OpenAI(**options)) as client
        ):
            if api == "chat":
                return run_chat_completions(client, model=MODEL, tools=tools, **kwargs)
            return run_responses(client, model=MODEL, tools=tools, **kwargs)

    async def main() -> Outcome:
        async with openai.AsyncOpenAI(**options) as client:
            if api == "chat":
                return await arun_chat_completions(client, model=MODEL, tools=tools, **kwargs)
            return await arun_responses(client, model=MODEL, tools=tools, **kwargs)

    return asyncio.run(main())


def proposed_ids(api: str, body: dict[str, Any]) -> list[str]:
    """Every tool call id the conversation of one request contains."""
    if api == "chat":
        return [c["id"] for m in body["messages"] if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    return [i["call_id"] for i in body["input"] if i.get("type") == "function_call"]
