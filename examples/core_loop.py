"""The engine alone, no SDK, no API key: a search loop is cut before execution, and a lost write is not re-sent.

Run: ``python examples/core_loop.py``
"""

from __future__ import annotations

import json
from typing import Any

from agents_loopguard import Budget, MemoryStore, create_runner


def search_loop() -> None:
    """The model keeps proposing the same search; the application sees no new records after the first page."""
    store = MemoryStore()
    found: dict[str, Any] = {"records": set()}
    executed: list[Any] = []

    def execute(call: Any) -> dict[str, Any]:
        executed.append(call)
        return {"status": "ok", "hits": ["order-17", "order-23"]}

    def verify(call: Any, result: Any) -> dict[str, Any]:
        # trusted application check: the revision is the number of distinct records we hold
        found["records"].update(result["hits"])
        return {"revision": len(found["records"]), "done": False, "effect": "none"}

    run = create_runner(
        budget=Budget(model_turns=20, tool_executions=10),
        store=store,
        execute=execute,
        verify=verify,
        task_id="demo-search-loop",
    )
    search = {"tool": "search_orders", "kind": "read", "args": {"customer": "c-42", "status": "open"}}
    outcome = run([search] * 10)
    print("search loop:", outcome.status, outcome.reason, f"- tool executions: {len(executed)} of 10 proposed")
    print("  kept what was verified:", outcome.value, "at revision", outcome.revision)
    print("  recovery record:", outcome.record().to_json())


def lost_write() -> None:
    """The payment is accepted by the receiver but the response times out; the guard does not send it again."""
    store = MemoryStore()
    sent: list[Any] = []

    def execute(call: Any) -> dict[str, Any]:
        sent.append(call)
        raise TimeoutError("read timed out after the receiver accepted the payment")

    def verify(call: Any, result: Any) -> dict[str, Any]:
        return {"revision": 1, "done": True, "effect": "committed"}

    pay = {"tool": "pay", "kind": "write", "operation_id": "invoice-7-pay-v1", "args": {"invoice": 7, "amount": 120}}
    first = create_runner(budget=Budget(model_turns=5, tool_executions=5), store=store, execute=execute, verify=verify)
    outcome = first([pay])
    print("lost write:", outcome.status, outcome.reason, "- operation", outcome.operation_id)
    retry = create_runner(budget=Budget(model_turns=5, tool_executions=5), store=store, execute=execute, verify=verify)
    again = retry([pay])
    print("  a new run proposing the same payment:", again.status, again.reason, f"- times sent: {len(sent)}")
    print("  ledger:", json.dumps({op.operation_id: str(op.state) for op in store.operations()}))
    print("  next:", again.record().allowed_next_actions)


if __name__ == "__main__":
    search_loop()
    lost_write()
