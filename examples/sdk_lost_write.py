"""A write whose response is lost is not sent again: the Agents SDK run ends as needs_reconciliation.

The tool confirms an order in a (fake) order system, which applies the change, and then the answer times out. A
timeout does not prove that the write failed, so the guard keeps the business operation ``unknown`` in its ledger;
the model (or a later run) asking for the same operation is refused before execution. The operator queries the
order system with the stable operation id and records the answer; only then does the same call return, from the
ledger, without running again.

No API key: the model is ``agents.testing.ScriptedModel``.

Run: ``python examples/sdk_lost_write.py``
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, MemoryStore
from agents_loopguard.ops.recovery import reconcile
from agents_loopguard.sdk import guarded_tool, run_guarded

ORDERS: dict[str, dict[str, Any]] = {"42": {"status": "pending", "version": 3}}
effects: list[str] = []  # every time the order system really applied a confirmation


def confirmed(args: dict[str, Any], output: Any) -> dict[str, Any]:
    """Trusted check against the order system itself, not the model's word."""
    order = ORDERS[str(args["order_id"])]
    ok = order["status"] == "confirmed"
    return {"revision": 1 if ok else 0, "done": ok, "effect": "committed" if ok else "not_committed"}


@guarded_tool(
    kind="write",
    operation_id=lambda a: f"confirm-order-{a['order_id']}-v{a['version']}",
    verify=confirmed,
)
async def confirm_order(order_id: int, version: int) -> dict[str, Any]:
    """Confirm an order at a given version."""
    ORDERS[str(order_id)]["status"] = "confirmed"  # the effect happens...
    effects.append(f"confirm {order_id} v{version}")
    raise TimeoutError("the order system did not answer in time")  # ...and the response is lost


def model_that_retries() -> ScriptedModel:
    call = {"order_id": 42, "version": 3}
    return ScriptedModel(
        [
            [function_call("confirm_order", call, call_id="call_1")],
            [function_call("confirm_order", call, call_id="call_2")],  # "it failed, let me try again"
            [assistant_message("Order 42 is confirmed.")],
        ]
    )


def show(title: str, outcome: Any) -> None:
    print(f"{title}: {outcome.status}/{outcome.reason} operation={outcome.operation_id}")
    print(f"  effects applied so far: {len(effects)}; tool executions reserved: {outcome.used.tools}")
    print("  recovery record:", json.dumps(outcome.record().to_dict()))


async def main() -> None:
    set_tracing_disabled(True)
    store = MemoryStore()
    budget = Budget(model_turns=6, tool_executions=4)

    # 1. The write times out after its effect: needs reconciliation; nothing is re-sent, even in "continue" mode.
    agent = Agent(name="clerk", model=model_that_retries(), tools=[confirm_order])
    first = await run_guarded(
        agent, "Confirm order 42.", budget=budget, store=store, task_id="t-1", on_refusal="continue"
    )
    show("first run", first)
    (operation,) = store.operations()
    print(f"  ledger: {operation.operation_id} is {operation.state}")

    # 2. Another run (a retry by the scheduler, a second worker) asks for the same operation: refused, not executed.
    agent = Agent(name="clerk", model=model_that_retries(), tools=[confirm_order])
    second = await run_guarded(agent, "Confirm order 42.", budget=budget, store=store, task_id="t-2")
    show("second run", second)

    # 3. Reconcile: query the receiver with the stable id, record its answer (an explicit, recorded decision).
    status = ORDERS["42"]["status"]
    print(f"operator: the order system says order 42 is {status!r}")
    answer = "committed" if status == "confirmed" else "unknown"
    reconcile(store, operation.operation_id, answer, who="ops@example", result={"status": "ok", "output": "confirmed"})

    # 4. The same task runs again: the committed write returns its stored result without executing.
    agent = Agent(name="clerk", model=model_that_retries(), tools=[confirm_order])
    third = await run_guarded(agent, "Confirm order 42.", budget=budget, store=store, task_id="t-1")
    show("after reconciliation", third)
    print(f"  the confirmation was applied {len(effects)} time(s): {effects}")


if __name__ == "__main__":
    asyncio.run(main())
