"""A DBOS worker process for tests/test_durable_dbos.py: an Agents SDK agent in a ``@DBOS.workflow``, guarded by
``run_guarded_dbos``, talking to the test's scripted OpenAI-compatible server over HTTP. Its one real side effect is a
line appended to ``writes.log`` per refund body that ran.

``python dbos_worker.py CONFIG_JSON``: ``mode`` ``start`` starts the workflow (and may SIGKILL itself at ``kill``),
``recover`` lets DBOS recover this executor's pending workflows and prints the workflow's result, ``queue`` serves a
DBOS queue until ``stop`` appears in the folder. Kill points: ``before-model-2`` (before the second model request),
``in-model-step`` (the first response arrived, inside DBOS's model step, before DBOS recorded it), ``after-model-1``
(the first model step recorded), ``in-tool`` (inside the refund body, after its write), ``in-verify`` (between the
write and its verify).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, RunHooks, set_tracing_disabled
from agents.models.interface import Model
from dbos import DBOS, DBOSConfig, SetWorkflowID
from openai import AsyncOpenAI

from agents_loopguard import Budget
from agents_loopguard.durable.dbos import resume_guarded_dbos, run_guarded_dbos
from agents_loopguard.sdk import guarded_tool
from agents_loopguard.store import SQLStore

CONFIG: dict[str, Any] = json.loads(sys.argv[1]) if __name__ == "__main__" else {"folder": "."}  # pytest collects it
FOLDER = Path(CONFIG["folder"])
WRITES = FOLDER / "writes.log"
set_tracing_disabled(True)


def kill(point: str) -> None:
    """SIGKILL this process at ``point`` the first time it is reached in this round (never in the recovery)."""
    marker = FOLDER / f"killed-{CONFIG.get('workflow_id')}"
    if CONFIG.get("kill") == point and not marker.exists():
        marker.write_text(point)
        os.kill(os.getpid(), signal.SIGKILL)


def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
    kill("in-verify")
    done = f"refund-{args['order']}" in (WRITES.read_text().split() if WRITES.exists() else [])
    return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}


def refund_body(order: int) -> str:
    with WRITES.open("a") as log:
        log.write(f"refund-{order}\n")
    kill("in-tool")
    return f"refunded order {order}"


@guarded_tool(kind="write", operation_id=lambda args: f"refund-{args['order']}", verify=refunded)
def refund(order: int) -> str:
    """Refund an order."""
    return refund_body(order)


@guarded_tool(
    kind="write",
    operation_id=lambda args: f"refund-{args['order']}",
    verify=refunded,
    needs_approval=True,
    name_override="refund",
)
def approved_refund(order: int) -> str:
    """Refund an order (a human approves every refund)."""
    return refund_body(order)


@guarded_tool
def lookup(order: int, page: int) -> str:
    """Read one page of an order's history."""
    return f"order {order}, page {page}: nothing new"


class KillInStep(Model):
    """The real model, and a kill after its first response arrived (inside DBOS's step, before DBOS records it)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        response = await self.inner.get_response(*args, **kwargs)
        kill("in-model-step")
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Points(RunHooks[Any]):
    def __init__(self) -> None:
        self.starts = self.ends = 0

    async def on_llm_start(self, *args: Any) -> None:
        self.starts += 1
        if self.starts == 2:
            kill("before-model-2")

    async def on_llm_end(self, *args: Any) -> None:
        self.ends += 1
        if self.ends == 1:
            kill("after-model-1")


def agent(work: str) -> Agent[Any]:
    client = AsyncOpenAI(base_url=CONFIG["base_url"], api_key="test", max_retries=0)
    model = KillInStep(OpenAIChatCompletionsModel(model="gpt-4.1-mini", openai_client=client))
    tools = {"refund": [refund], "approve": [approved_refund], "lookup": [lookup]}[work]
    return Agent(name="refunds", model=model, tools=tools, model_settings=ModelSettings(max_tokens=64))


@DBOS.workflow()
async def refund_flow(task_id: str, order: int, work: str = "refund") -> dict[str, Any]:
    store = SQLStore(CONFIG["store_url"])
    budget = Budget(model_turns=CONFIG.get("model_turns", 6), tool_executions=CONFIG.get("tool_executions", 4))
    try:
        outcome = await run_guarded_dbos(
            agent(work),
            f"{'refund' if work == 'approve' else work} order {order}",
            hooks=Points(),
            budget=budget,
            store=store,
            task_id=task_id,
        )
    finally:
        store.close()
    return _result(outcome, order)


def _result(outcome: Any, order: int) -> dict[str, Any]:
    used = outcome.used
    return {
        "status": str(outcome.status),
        "reason": str(outcome.reason),
        "models": used.models,
        "tools": used.tools,
        "pid": os.getpid(),
        "order": order,
        "pause_id": outcome.pause_id,
    }


@DBOS.workflow()
async def resume_flow(pause_id: str, order: int) -> dict[str, Any]:
    store = SQLStore(CONFIG["store_url"])
    try:
        outcome = await resume_guarded_dbos(agent("approve"), pause_id, store=store, who="ana", hooks=Points())
    finally:
        store.close()
    return _result(outcome, order)


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
    DBOS.launch()
    if CONFIG["mode"] == "queue":  # one workflow at a time per worker: the queue spreads them over the workers
        DBOS.register_queue("refunds", worker_concurrency=1, polling_interval_sec=0.1)


def main() -> None:
    launch()
    mode = CONFIG["mode"]
    if mode == "start":
        with SetWorkflowID(CONFIG["workflow_id"]):
            if "pause_id" in CONFIG:
                handle = DBOS.start_workflow(resume_flow, CONFIG["pause_id"], CONFIG["order"])
            else:
                work = CONFIG.get("work", "refund")
                handle = DBOS.start_workflow(refund_flow, CONFIG["task_id"], CONFIG.get("order", 42), work)
        print(json.dumps({"workflow_id": CONFIG["workflow_id"], **handle.get_result()}), flush=True)
    elif mode == "recover":
        # The killed workers' executors are gone: their pending workflows are recovered here, as DBOS's admin
        # endpoint /dbos-workflow-recovery (what Conductor calls for a dead executor) does it.
        DBOS._recover_pending_workflows(CONFIG["executors"])
        for workflow_id in CONFIG["workflow_ids"]:
            print(
                json.dumps({"workflow_id": workflow_id, **DBOS.retrieve_workflow(workflow_id).get_result()}), flush=True
            )
    else:  # queue: DBOS dequeues workflows to this worker until the test says stop
        (FOLDER / f"ready-{CONFIG['executor']}").write_text("")
        while not (FOLDER / "stop").exists():
            time.sleep(0.05)
    DBOS.destroy()


if __name__ == "__main__":
    main()
