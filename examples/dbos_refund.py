"""A refund agent in a DBOS workflow, guarded: ``python examples/dbos_refund.py`` (no API key).

Needs PostgreSQL for DBOS's system database and the guard's store: ``DBOS_SYSTEM_DATABASE_URL`` (default
``postgresql://postgres@127.0.0.1:5432/loopguard_dbos``, created if missing) and ``LOOPGUARD_DATABASE_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). The model is scripted (``agents.testing.ScriptedModel``): it
asks for the refund once, then answers. The workflow runs twice under the same id: the second run is DBOS's replay
of a finished workflow, and the refund's body still ran once.

The refund's operation id is its business key, built from the tool's arguments only (``refund-order-<order>``):
the same in every process, so a process that recovers the workflow after a crash finds the write in the ledger.
Never put a per-process value (a run id, a timestamp, a random number) into it. Each run of this program refunds a
new order (its number picked by ``main`` and given to the workflow as its input, which DBOS records).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import psycopg
from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from dbos import DBOS, SetWorkflowID

from agents_loopguard import Budget
from agents_loopguard.durable.dbos import run_guarded_dbos
from agents_loopguard.sdk import guarded_tool
from agents_loopguard.store import SQLStore

SYSTEM_URL = os.environ.get("DBOS_SYSTEM_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/loopguard_dbos")
STORE_URL = os.environ.get("LOOPGUARD_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REFUNDS: dict[int, int] = {}  # the payment system (here: a dict); each body run counts
RUNS: list[int] = []


def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
    """Ask the payment system, not the model."""
    done = REFUNDS.get(args["order"]) == args["amount"]
    return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}


@guarded_tool(kind="write", operation_id=lambda args: f"refund-order-{args['order']}", verify=refunded)
def refund(order: int, amount: int) -> str:
    """Refund an order."""
    RUNS.append(order)
    REFUNDS[order] = amount
    return f"refunded {amount} EUR for order {order}"


@DBOS.workflow()
async def refund_workflow(order: int) -> str:
    asks = function_call("refund", {"order": order, "amount": 30}, call_id="call-refund")
    model = ScriptedModel([[asks], [assistant_message(f"Order {order} refunded.")]])
    agent = Agent(name="refunds", model=model, tools=[refund])
    store = SQLStore(STORE_URL)
    try:
        outcome = await run_guarded_dbos(
            agent, f"refund order {order}", budget=Budget(model_turns=4, tool_executions=2), store=store
        )
    finally:
        store.close()
    return f"{outcome.status}/{outcome.reason}, model turns {outcome.used.models}"


def main() -> None:
    set_tracing_disabled(True)
    database = SYSTEM_URL.rsplit("/", 1)
    with psycopg.connect(f"{database[0]}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database[1],)).fetchone():
            conn.execute(f'CREATE DATABASE "{database[1]}"')
    order = 100_000 + uuid.uuid4().int % 900_000  # a new order to refund on each run of the program
    DBOS(config={"name": "loopguard-example", "system_database_url": SYSTEM_URL, "executor_id": f"ex-{order}"})
    DBOS.launch()
    workflow_id = f"refund-{order}"
    try:
        for attempt in ("first run", "the same workflow again"):
            with SetWorkflowID(workflow_id):  # the task id defaults to the workflow's id
                print(f"{attempt}: {DBOS.start_workflow(refund_workflow, order).get_result()}")
        print(f"refund bodies run: {len(RUNS)}")
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    main()
