"""A Temporal activity worker process for tests/test_durable_temporal.py: the OpenAI Agents plugin's model activity
with the guard inside it (``GuardedActivityModels``) and the guarded tool activities, on the task queue the test's
workflow worker schedules them on; the model is the real ``openai`` client against the test's scripted server.

``python temporal_worker.py CONFIG_JSON`` serves until it is killed. It SIGKILLs itself the first time the workflow
``CONFIG["workflow"]`` reaches ``CONFIG["kill"]`` (a marker file per workflow: never in the retry): ``in-model-step``
(the model answered, inside the model activity, before Temporal recorded its result), ``in-tool`` (inside the refund
body, after its write), ``in-verify`` (between the write and its verify).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from agents import OpenAIChatCompletionsModel, set_tracing_disabled
from agents.models.interface import Model, ModelProvider
from openai import AsyncOpenAI
from temporalio import activity
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from agents_loopguard import Budget, RunOptions
from agents_loopguard.durable.temporal import GuardedActivityModels
from agents_loopguard.store import SQLStore
from tests.support import temporal_flows as flows  # the test starts it with the clone on PYTHONPATH

CONFIG: dict[str, Any] = json.loads(sys.argv[1]) if __name__ == "__main__" else {"folder": "."}  # pytest collects it
FOLDER = Path(CONFIG["folder"])
set_tracing_disabled(True)


def kill(point: str, workflow_id: str) -> None:
    marker = FOLDER / f"killed-{workflow_id}"
    if CONFIG.get("kill") == point and CONFIG.get("workflow") == workflow_id and not marker.exists():
        marker.write_text(point)
        os.kill(os.getpid(), signal.SIGKILL)


class KillInStep(Model):
    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.model = getattr(inner, "model", None)

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        response = await self.inner.get_response(*args, **kwargs)
        kill("in-model-step", activity.info().workflow_id)
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Provider(ModelProvider):
    def __init__(self) -> None:
        self.client = AsyncOpenAI(base_url=CONFIG["base_url"], api_key="test", max_retries=0)

    def get_model(self, model_name: str | None) -> Model:
        return KillInStep(OpenAIChatCompletionsModel(model=model_name or "gpt-4.1-mini", openai_client=self.client))


async def main() -> None:
    store = SQLStore(CONFIG["store_url"])
    options = RunOptions(budget=Budget(model_turns=6, tool_executions=4), store=store)
    flows.WRITES[:], flows.OPTIONS[:] = [Path(CONFIG["writes"])], [options]
    flows.AFTER_WRITE[:] = [lambda order: kill("in-tool", activity.info().workflow_id)]
    flows.BEFORE_VERIFY[:] = [lambda order: kill("in-verify", activity.info().workflow_id)]
    params = ModelActivityParameters(start_to_close_timeout=timedelta(seconds=3))
    plugin = OpenAIAgentsPlugin(model_params=params, model_provider=GuardedActivityModels(Provider(), options=options))
    client = await Client.connect(CONFIG["target"], namespace=CONFIG["namespace"], plugins=[plugin])
    async with Worker(client, task_queue=CONFIG["queue"], activities=[flows.refund, flows.lookup]):
        (FOLDER / f"ready-{os.getpid()}").write_text("")
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
