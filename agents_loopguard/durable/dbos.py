"""An Agents SDK agent in a DBOS workflow, guarded: :func:`run_guarded_dbos` (dbos 3.4, dbos-openai-agents 0.3).

Which layer wraps which, from the outside in:

* the workflow (``@DBOS.workflow()``) calls :func:`run_guarded_dbos`, which makes the guarded copy of the agent
  (its model wrapped by :class:`~agents_loopguard.sdk.GuardedModel`, its function tools by the guard) and hands
  it to ``DBOSRunner.run``;
* ``DBOSRunner`` wraps the copy's model in its model step (``DBOSModelWrapper``: each ``get_response`` a
  ``@DBOS.step``) and each tool's invoker in its ordering turnstile; a model it resolves by name through its own
  ``DBOSModelProvider`` gets the guard inside the step as well
  (:func:`~agents_loopguard.sdk.model.register_step_model`);
* so the guard's reservation runs *inside* DBOS's model step: a step DBOS answers from its system database after a
  crash never reaches it (nothing reserved), and a step DBOS executes again is that request's attempt again;
* tools are not DBOS steps (unless the application makes them so): a replayed workflow runs them again, and the
  guard answers each from the task's record, keyed by the workflow id and the model's tool-call id (stable: it
  comes from the recorded model response). A write whose worker died inside it is ``unknown`` in the ledger: never
  sent again, the run ends ``needs_reconciliation``.

The task defaults to the workflow's id, so DBOS's recovery of the workflow continues the same task and budget;
several workflows (queue workers) given one ``task_id`` share one budget through the store (PostgreSQL).

The DBOS example in ``docs/durable.md`` runs against a real DBOS on PostgreSQL (``tests/test_durable_dbos.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from agents import Agent, RunConfig
from agents.lifecycle import RunHooks
from dbos import DBOS
from dbos_openai_agents import DBOSRunner
from dbos_openai_agents.runner import DBOSModelWrapper
from typing_extensions import Unpack

from ..engine.outcome import Outcome
from ..run import RunFields, RunOptions
from ..sdk import LoopGuard, register_step_model

__all__ = ["DBOSSteps", "run_guarded_dbos"]

register_step_model(DBOSModelWrapper, "model")


class DBOSSteps:
    """Where DBOS is in the workflow (:class:`~agents_loopguard.run.DurableSteps`): a model call is keyed by the
    workflow id and DBOS's step id (its function id, assigned in order, the same on every replay), a tool execution
    by the workflow id and the model's tool-call id.

    >>> DBOSSteps().model_step() is None, DBOSSteps().tool_step("call-1") is None   # outside a workflow
    (True, True)
    """

    def model_step(self) -> str | None:
        workflow, step = DBOS.workflow_id, DBOS.step_id
        return None if workflow is None or step is None else f"dbos:{workflow}:step:{step}"

    def tool_step(self, call_id: str | None) -> str | None:
        workflow = DBOS.workflow_id
        return None if workflow is None or not call_id else f"dbos:{workflow}:tool:{call_id}"


async def run_guarded_dbos(
    agent: Agent[Any],
    input: Any,
    *,
    options: RunOptions | None = None,
    context: Any = None,
    max_turns: int | None = None,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | Mapping[str, Any] | None = None,
    error_handlers: Any = None,
    **fields: Unpack[RunFields],
) -> Outcome:
    """Run ``agent`` through ``DBOSRunner.run`` under the task's guard, inside the current ``@DBOS.workflow()``, and
    return the one :class:`~agents_loopguard.Outcome` (as :func:`~agents_loopguard.sdk.run_guarded` does).

    The options are :func:`~agents_loopguard.sdk.run_guarded`'s; ``task_id`` defaults to the workflow's id (a
    recovered workflow continues its task). The model must be the agent's (``run_config.model`` is refused: DBOS
    makes only the agent's model a step). DBOS does not stream.

    Raises ``RuntimeError`` outside a DBOS workflow.
    """
    workflow = DBOS.workflow_id
    if workflow is None:
        raise RuntimeError("run_guarded_dbos runs inside a @DBOS.workflow() function (DBOSRunner.run needs one)")
    opts = RunOptions.merge(options, fields)
    config = RunConfig(**run_config) if isinstance(run_config, Mapping) else run_config
    if config is not None and config.model is not None:
        raise ValueError(
            "run_config.model is not run as a DBOS step: set the model on the agent (Agent(model=...)) instead"
        )
    if opts.guard is None and opts.task_id is None:
        opts = dataclasses.replace(opts, task_id=workflow)
    guard = LoopGuard(input, dataclasses.replace(opts, durable=DBOSSteps()))
    if guard.finished is not None:
        return guard.finished
    kwargs: dict[str, Any] = {
        "hooks": guard.hooks(hooks),
        "run_config": guard.run_config(config),
        "error_handlers": guard.error_handlers(error_handlers),
        "context": context,
    }
    if max_turns is not None:
        kwargs["max_turns"] = max_turns
    try:
        result: Any = await DBOSRunner.run(guard.compose(agent), guard.input, **kwargs)
    except asyncio.CancelledError:
        result = None
    except Exception as exc:
        result = exc
    return await guard.outcome(result)
