"""A DBOS worker process for tests/test_durable_dbos.py: an Agents SDK agent in a ``@DBOS.workflow``, guarded by
``run_guarded_dbos``, talking to the test's scripted OpenAI-compatible server over HTTP. Its one real side effect is
a refund per body run (tests/support/durable_cases.py: a line in ``writes.log``; a row of the datasource's table for
a transaction body).

``python -m tests.workers.dbos_worker CONFIG_JSON``: ``mode`` ``start`` starts the workflow (and may SIGKILL itself
at ``kill``, one of durable_cases.KILL_POINTS), ``recover`` lets DBOS recover the dead executors' pending workflows
and prints their results, ``fork`` forks ``workflow_id`` from ``start_step`` and prints the fork's result, ``queue``
serves a DBOS queue until ``stop`` appears in the folder.

The refund tool's ``body`` is ``plain`` (a guarded function tool), ``step`` (a ``@DBOS.step`` as the tool's
function, what dbos-openai-agents tells users to write) or ``transaction`` (a datasource transaction as the tool's
function).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, set_tracing_disabled
from dbos import DBOS, AsyncSQLAlchemyDatasource, DBOSConfig, SetWorkflowID

from agents_loopguard import Budget
from agents_loopguard.durable.dbos import resume_guarded_dbos, run_guarded_dbos
from agents_loopguard.run.durable import Replay
from agents_loopguard.sdk import guarded_tool
from agents_loopguard.store import SQLStore
from agents_loopguard.values.probes import UNKNOWN, committed, not_committed
from tests.support.durable_cases import KillInStep, Kills, Points, Refunds, model_client, operation_id, result

CONFIG: dict[str, Any] = json.loads(sys.argv[1]) if __name__ == "__main__" else {"folder": "."}  # pytest collects it
FOLDER = Path(CONFIG["folder"])
KILLS = Kills(FOLDER)
KILLS.arm(CONFIG.get("kill", ""), CONFIG.get("workflow_id", ""))
REFUNDS = Refunds(FOLDER, KILLS)
DATASOURCE: list[AsyncSQLAlchemyDatasource] = []
set_tracing_disabled(True)


@guarded_tool(kind="write", operation_id=operation_id, verify=REFUNDS.verify)
def refund(order: int) -> str:
    """Refund an order."""
    written = REFUNDS.write(order)
    KILLS("in-tool")
    return written


@guarded_tool(
    kind="write", operation_id=operation_id, verify=REFUNDS.verify, probe=REFUNDS.probe, name_override="refund"
)
def probed_refund(order: int) -> str:
    """Refund an order (the refund has a probe: the receiver is asked when its answer was lost)."""
    KILLS("before-write")
    written = REFUNDS.write(order)
    KILLS("in-tool")
    return written


@guarded_tool(
    kind="write", operation_id=operation_id, verify=REFUNDS.verify, probe=lambda op, a: UNKNOWN, name_override="refund"
)
def unprobed_refund(order: int) -> str:
    """Refund an order (its probe never knows)."""
    written = REFUNDS.write(order)
    KILLS("in-tool")
    return written


@guarded_tool(kind="write", operation_id=operation_id, verify=REFUNDS.verify, name_override="refund")
@DBOS.step()
async def refund_step(order: int) -> str:
    """Refund an order (the write is a DBOS step)."""
    return REFUNDS.write(order)


def _rows(order: int) -> bool:
    engine = sa.create_engine(CONFIG["app_url"].replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        query = f'SELECT count(*) FROM "{CONFIG["app_schema"]}".refunds WHERE refund_order = :o'
        done = bool(conn.execute(sa.text(query), {"o": order}).scalar())
    engine.dispose()
    return done


def _refunded_rows(args: dict[str, Any], output: Any) -> dict[str, Any]:
    KILLS("in-verify")
    done = _rows(args["order"])
    return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}


def _probe_rows(operation_id: str, args: dict[str, Any]) -> Any:
    """The receiver asked, read-only: did a transaction commit the refund's row?"""
    if _rows(args["order"]):
        return committed(f"refunded order {args['order']}", evidence=f"the row of {operation_id} is committed")
    return not_committed(evidence=f"no committed row for {operation_id}")


async def _transaction(order: int) -> str:
    """Refund an order (the write is a row of a datasource transaction)."""
    session = DATASOURCE[0].sql_session()
    insert = f'INSERT INTO "{CONFIG["app_schema"]}".refunds (refund_order) VALUES (:o)'
    await session.execute(sa.text(insert), {"o": order})
    KILLS("in-step")  # the row written, the transaction not yet committed
    return f"refunded order {order}"


@guarded_tool(kind="write", operation_id=operation_id, verify=_refunded_rows, name_override="refund")
async def refund_transaction(order: int) -> str:
    """Refund an order (the write is a datasource transaction)."""
    return str(await DATASOURCE[0].transaction(name="refund_tx")(_transaction)(order))


@guarded_tool(kind="write", operation_id=operation_id, verify=_refunded_rows, probe=_probe_rows, name_override="refund")
async def probed_transaction(order: int) -> str:
    """Refund an order (a datasource transaction; the refund has a probe that reads the committed rows)."""
    return str(await DATASOURCE[0].transaction(name="refund_tx")(_transaction)(order))


@guarded_tool(
    kind="write", operation_id=operation_id, verify=REFUNDS.verify, needs_approval=True, name_override="refund"
)
def approved_refund(order: int) -> str:
    """Refund an order (a human approves every refund)."""
    return REFUNDS.write(order)


@guarded_tool
def lookup(order: int, page: int) -> str:
    """Read one page of an order's history."""
    return f"order {order}, page {page}: nothing new"


TOOLS = {
    "refund": refund,
    "step": refund_step,
    "transaction": refund_transaction,
    "approve": approved_refund,
    "probed": probed_refund,
    "probed-unknown": unprobed_refund,
    "probed-transaction": probed_transaction,
}


def agent(work: str) -> Agent[Any]:
    inner = OpenAIChatCompletionsModel(model="gpt-4.1-mini", openai_client=model_client(CONFIG["base_url"], KILLS))
    tools = [lookup] if work == "lookup" else [TOOLS[work]]
    return Agent(
        name="refunds", model=KillInStep(inner, KILLS), tools=tools, model_settings=ModelSettings(max_tokens=64)
    )


@DBOS.workflow()
async def refund_flow(task_id: str | None, order: int, work: str = "refund") -> dict[str, Any]:
    store = SQLStore(CONFIG["store_url"])
    budget = Budget(model_turns=CONFIG.get("model_turns", 6), tool_executions=CONFIG.get("tool_executions", 4))
    try:
        outcome = await run_guarded_dbos(
            agent(work),
            f"{'lookup' if work == 'lookup' else 'refund'} order {order}",
            hooks=Points(KILLS),
            budget=budget,
            store=store,
            task_id=task_id,
        )
    finally:
        store.close()
    return result(outcome, order=order, task_id=outcome.task_id, replay=isinstance(outcome.result, Replay))


@DBOS.workflow()
async def resume_flow(pause_id: str, order: int) -> dict[str, Any]:
    store = SQLStore(CONFIG["store_url"])
    try:
        outcome = await resume_guarded_dbos(agent("approve"), pause_id, store=store, who="ana", hooks=Points(KILLS))
    finally:
        store.close()
    return result(outcome, order=order, task_id=outcome.task_id)


def launch() -> None:
    config: DBOSConfig = {
        "name": "loopguard-test",
        "system_database_url": CONFIG["system_url"],
        "executor_id": CONFIG["executor"],
        "application_version": "loopguard-test-1",
        "notification_listener_polling_interval_sec": 0.05,
        "dbos_system_schema": CONFIG["system_schema"],
    }
    DBOS(config=config)
    if CONFIG.get("datasource"):  # the workflows this process runs or recovers include transaction bodies
        # no pooled connection outlives the event loop that made it (DBOS runs the workflows on its own loop)
        made = AsyncSQLAlchemyDatasource.create(
            CONFIG["app_url"], engine_kwargs={"poolclass": sa.NullPool}, schema=CONFIG["app_schema"]
        )
        DATASOURCE.append(asyncio.run(made))
    DBOS.launch()
    if CONFIG["mode"] == "queue":  # one workflow at a time per worker: the queue spreads them over the workers
        DBOS.register_queue("refunds", worker_concurrency=1, polling_interval_sec=0.1)


def _print(workflow_id: str, answer: dict[str, Any]) -> None:
    print(json.dumps({"workflow_id": workflow_id, **answer}), flush=True)


def main() -> None:
    launch()
    mode = CONFIG["mode"]
    if mode == "start":
        with SetWorkflowID(CONFIG["workflow_id"]):
            if "pause_id" in CONFIG:
                handle = DBOS.start_workflow(resume_flow, CONFIG["pause_id"], CONFIG["order"])
            else:
                work = CONFIG.get("work", "refund")
                handle = DBOS.start_workflow(refund_flow, CONFIG.get("task_id"), CONFIG.get("order", 42), work)
        _print(CONFIG["workflow_id"], handle.get_result())
    elif mode == "recover":
        # The killed workers' executors are gone: their pending workflows are recovered here, as DBOS's admin
        # endpoint /dbos-workflow-recovery (what Conductor calls for a dead executor) does it.
        DBOS._recover_pending_workflows(CONFIG["executors"])
        for workflow_id in CONFIG["workflow_ids"]:
            try:
                _print(workflow_id, DBOS.retrieve_workflow(workflow_id).get_result())
            except Exception as exc:  # the test reports every workflow that failed, not only the first
                _print(workflow_id, {"error": f"{type(exc).__name__}: {exc}"})
    elif mode == "fork":
        fork = DBOS.fork_workflow(CONFIG["workflow_id"], CONFIG["start_step"])
        _print(fork.get_workflow_id(), fork.get_result())
    else:  # queue: DBOS dequeues workflows to this worker until the test says stop
        (FOLDER / f"ready-{CONFIG['executor']}").write_text("")
        while not (FOLDER / "stop").exists():
            time.sleep(0.05)
    DBOS.destroy()


if __name__ == "__main__":
    main()
