"""A Temporal activity worker process for tests/test_durable_temporal.py: the OpenAI Agents plugin's model activity
with the guard inside it (``GuardedActivityModels``), the guarded tool activities and the conclusion activity, on
the task queue the test's workflow worker schedules them on; the model is the real ``openai`` client against the
test's scripted server.

``python -m tests.workers.temporal_worker CONFIG_JSON`` serves until it is killed. It SIGKILLs itself the first
time the workflow ``CONFIG["workflow"]`` reaches ``CONFIG["kill"]`` (tests/support/durable_cases.py: a marker file
per workflow, never in the retry): ``in-model-step``, ``in-tool`` (inside the refund body, after its write),
``in-verify``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from agents import OpenAIChatCompletionsModel, set_tracing_disabled
from agents.models.interface import Model, ModelProvider
from temporalio import activity
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.worker import Worker

from agents_loopguard import Budget, RunOptions
from agents_loopguard.durable.temporal import GuardedActivityModels
from agents_loopguard.store import SQLStore
from tests.support import temporal_flows as flows
from tests.support.durable_cases import KillInStep, Kills, model_client

CONFIG: dict[str, Any] = json.loads(sys.argv[1]) if __name__ == "__main__" else {"folder": "."}  # pytest collects it
KILLS = Kills(Path(CONFIG["folder"]))
KILLS.arm(CONFIG.get("kill", ""), CONFIG.get("workflow", ""))
set_tracing_disabled(True)


class KillInThisWorkflow(KillInStep):
    """``in-model-step``, for the workflow the process was told of only (a retried activity of the previous round's
    workflow may land here)."""

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if activity.info().workflow_id == KILLS.tag:
            return await super().get_response(*args, **kwargs)
        return await self.inner.get_response(*args, **kwargs)


class Provider(ModelProvider):
    def __init__(self) -> None:
        self.client = model_client(CONFIG["base_url"], KILLS)

    def get_model(self, model_name: str | None) -> Model:
        inner = OpenAIChatCompletionsModel(model=model_name or "gpt-4.1-mini", openai_client=self.client)
        return KillInThisWorkflow(inner, KILLS)


def _on_tag(point: str) -> Any:
    """The kill point ``point`` of the refund, for the workflow the process was told of only."""
    return lambda order: KILLS(point) if activity.info().workflow_id == KILLS.tag else None


async def main() -> None:
    store = SQLStore(CONFIG["store_url"])
    options = RunOptions(budget=Budget(model_turns=6, tool_executions=4), store=store)
    flows.WRITES[:], flows.OPTIONS[:] = [Path(CONFIG["writes"])], [options]
    flows.AFTER_WRITE[:], flows.BEFORE_VERIFY[:] = [_on_tag("in-tool")], [_on_tag("in-verify")]
    flows.BEFORE_WRITE[:] = [_on_tag("before-write")]
    params = ModelActivityParameters(start_to_close_timeout=timedelta(seconds=3))
    models = GuardedActivityModels(Provider(), options=options)
    plugin = OpenAIAgentsPlugin(model_params=params, model_provider=models)
    client = await Client.connect(CONFIG["target"], namespace=CONFIG["namespace"], plugins=[plugin])
    refund = flows.probed_refund if CONFIG.get("probed") else flows.refund  # both are the activity "refund"
    activities = [refund, flows.lookup, models.conclusion()]
    async with Worker(client, task_queue=CONFIG["queue"], activities=activities):
        (Path(CONFIG["folder"]) / f"ready-{os.getpid()}").write_text("")
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
