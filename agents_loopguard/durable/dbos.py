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
  sent again, the run ends ``needs_reconciliation``;
* a tool body that is a ``@DBOS.step`` or a datasource transaction (or calls them) takes DBOS's operation ids after
  the one it began at: when the guard does not run the body again (answered from the record, or refused after an
  attempt that died in it), DBOS's counter is moved past the ids the body took (:class:`DBOSSteps`), so DBOS meets
  the next model step where it recorded it, never a second effect.

The task defaults to the workflow's id (for a fork, ``DBOS.fork_workflow``, the id of the workflow it was forked
from, followed to the first), so DBOS's recovery of the workflow, and a fork of it, continue the same task and
budget; several workflows (queue workers) given one ``task_id`` share one budget through the store (PostgreSQL).

The DBOS example in ``docs/durable.md`` runs against a real DBOS on PostgreSQL (``tests/test_durable_dbos.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from agents import Agent, RunConfig, RunState
from agents.lifecycle import RunHooks
from dbos import DBOS
from dbos._context import get_local_dbos_context
from dbos._error import DBOSAwaitedWorkflowCancelledError, DBOSUnexpectedStepError, DBOSWorkflowCancelledError
from dbos_openai_agents import DBOSRunner
from dbos_openai_agents.runner import DBOSModelWrapper, Turnstile
from typing_extensions import Unpack

from ..ops.approvals import DecisionError
from ..run import RunFields, RunOptions
from ..run.durable import replay_of
from ..sdk import LoopGuard, register_step_model
from ..sdk.claims import ClaimedState
from ..sdk.private import tool_decisions
from ..sdk.resume import claim_pause, decided_state
from ..sdk.run import runner_kwargs
from ..store.defaults import default_store
from ..values.outcome import Outcome

__all__ = ["DBOSSteps", "resume_guarded_dbos", "run_guarded_dbos"]

register_step_model(DBOSModelWrapper, "model")


T = TypeVar("T")
_CONTROL = (DBOSUnexpectedStepError, DBOSWorkflowCancelledError, DBOSAwaitedWorkflowCancelledError)
"""DBOS's own control flow out of a run: a workflow that does not replay as recorded, a cancelled workflow. They
end the workflow, not the task: re-raised, never stored as the task's outcome."""


class DBOSSteps:
    """Where DBOS is in the workflow (:class:`~agents_loopguard.run.DurableSteps`): a model call is keyed by the
    workflow id and DBOS's step id (its function id, assigned in order, the same on every replay), a tool execution
    by the id of the workflow the run began in (``origin``: a fork's original) and the model's tool-call id.

    It is also the :class:`~agents_loopguard.run.durable.BodyJournal` of DBOS: a body's steps and transactions take
    the function ids after the one it began at (recorded as ``[began, ended]``); a body not run again moves DBOS's
    counter (``DBOSContext.function_id``: dbos 3.4 has no public door) past them, or, for an attempt that died in
    the body, past the last operation DBOS recorded for the workflow (read outside the workflow, so not a step).

    >>> DBOSSteps().model_step() is None, DBOSSteps().tool_step("call-1") is None   # outside a workflow
    (True, True)
    """

    def __init__(self, origin: str | None = None) -> None:
        self.origin = origin

    def model_step(self) -> str | None:
        workflow, step = DBOS.workflow_id, DBOS.step_id
        return None if workflow is None or step is None else f"dbos:{workflow}:step:{step}"

    def tool_step(self, call_id: str | None) -> str | None:
        workflow = self.origin or DBOS.workflow_id
        return None if workflow is None or not call_id else f"dbos:{workflow}:tool:{call_id}"

    def body_began(self, key: str, noted: Callable[[], None]) -> int:
        return int(_context().function_id)

    def body_ended(self, began: int) -> list[int] | None:
        ended = _context().function_id
        return [began, ended] if ended > began else None

    async def pass_over(self, journal: Any, began: int, noted: Callable[[], bool]) -> bool:
        context = _context()
        if journal is not None:
            last = int(journal[1])
        else:  # the attempt died in the body: what DBOS recorded past this point is the body's
            steps = await _outside(DBOS.list_workflow_steps_async(context.workflow_id, load_output=False))
            last = max((int(step["function_id"]) for step in steps), default=0)
        context.function_id = max(context.function_id, last)
        return False

    def journal_only(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()


def _context() -> Any:
    context = get_local_dbos_context()
    if context is None or not hasattr(context, "function_id"):
        raise RuntimeError("this dbos keeps its step counter elsewhere: a tool body's steps cannot be passed over")
    return context


async def _outside(work: Coroutine[Any, Any, T]) -> T:
    """Await DBOS's ``work`` outside the workflow's context: DBOS neither records it as a step nor counts it."""
    task: asyncio.Future[T] = contextvars.Context().run(asyncio.ensure_future, work)  # the task copies this context
    return await task


async def _origin(workflow_id: str) -> str:
    """The workflow a chain of forks began with (the workflow itself when it is no fork): a fork's ``forked_from``
    never changes, so every replay of the workflow reads the same."""
    seen = [workflow_id]
    while len(seen) < 100:
        status = await _outside(DBOS.get_workflow_status_async(seen[-1]))
        parent = getattr(status, "forked_from", None)
        if not parent or parent in seen:
            break
        seen.append(str(parent))
    return seen[-1]


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
    recovered workflow continues its task; a fork continues the task of the workflow it was forked from). The model
    must be the agent's (``run_config.model`` is refused: DBOS makes only the agent's model a step). DBOS does not
    stream. A task that had already ended runs nothing: its stored outcome comes back marked as a replay
    (``Outcome.result`` a :class:`~agents_loopguard.run.durable.Replay`).

    Raises ``RuntimeError`` outside a DBOS workflow. DBOS's own control flow (a cancelled workflow, a replay that
    does not match DBOS's record) goes through untouched, never stored as the task's outcome.
    """
    workflow = await _origin(_workflow_id("run_guarded_dbos"))
    opts = RunOptions.merge(options, fields)
    config = RunConfig(**run_config) if isinstance(run_config, Mapping) else run_config
    if config is not None and config.model is not None:
        raise ValueError(
            "run_config.model is not run as a DBOS step: set the model on the agent (Agent(model=...)) instead"
        )
    if opts.guard is None and opts.task_id is None:
        opts = dataclasses.replace(opts, task_id=workflow)
    guard = LoopGuard(input, dataclasses.replace(opts, durable=DBOSSteps(workflow)))
    if guard.finished is not None:
        return replay_of(guard.finished)
    sdk = {"context": context, "max_turns": max_turns}
    kwargs = runner_kwargs(guard, hooks=hooks, run_config=config, error_handlers=error_handlers, sdk=sdk)
    try:
        result: Any = await DBOSRunner.run(guard.compose(agent, entering=_prime_turnstile), guard.input, **kwargs)
    except asyncio.CancelledError:
        result = None
    except _CONTROL:
        await guard.close()
        raise
    except Exception as exc:
        result = exc
    return await guard.outcome(result)


def _prime_turnstile(agent: Agent[Any], input: Any, kwargs: dict[str, Any]) -> None:
    """A resumed ``RunState`` runs its approved calls before any model call, but DBOS's tool turnstile is set only
    by a model response (an empty one fails every call: ``KeyError``). Set it to the approved calls, in the state's
    order, on the run's DBOS state (``DBOSModelWrapper._state``: dbos-openai-agents 0.3 has no public door)."""
    if not isinstance(input, RunState) or not input.get_interruptions():
        return
    provider = getattr(kwargs.get("run_config"), "model_provider", None)
    provider = getattr(provider, "inner_provider", provider)  # the guard's provider around DBOS's
    state = getattr(agent.model, "_state", None) or getattr(provider, "_state", None)
    if state is None or not hasattr(state, "turnstile"):
        raise RuntimeError(
            "this dbos-openai-agents keeps its tool turnstile elsewhere: a resumed approval cannot run under it"
        )
    approved = tool_decisions(input)
    calls = [str(item.call_id) for item in input.get_interruptions() if approved(item.name, str(item.call_id))]
    state.turnstile = Turnstile(calls)


def _workflow_id(entry: str) -> str:
    workflow = DBOS.workflow_id
    if workflow is None:
        raise RuntimeError(f"{entry} runs inside a @DBOS.workflow() function (DBOSRunner.run needs one)")
    return workflow


async def resume_guarded_dbos(
    agent: Agent[Any],
    pause_id: str,
    *,
    decisions: Mapping[str, str] | None = None,
    why: str = "",
    rejection_message: str | None = None,
    options: RunOptions | None = None,
    context: Any = None,
    max_turns: int | None = None,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | Mapping[str, Any] | None = None,
    **fields: Unpack[RunFields],
) -> Outcome:
    """Resume a stored approval pause once, inside the current ``@DBOS.workflow()`` (any process), under the pause's
    own task: same budget, counters continuing (R13), as :func:`~agents_loopguard.sdk.resume_guarded` does.

    The claim (checks, decisions, resumed once) is a DBOS step: a replay of this workflow after a crash reads the
    recorded claim and never claims twice; the run then goes on through :func:`run_guarded_dbos`. ``who=`` is
    required; ``store=`` is the store the pause was saved in.
    """
    _workflow_id("resume_guarded_dbos")
    opts = RunOptions.merge(options, fields)
    if not opts.who:
        raise DecisionError("a resume is recorded with who resumes: pass who=")
    if opts.guard is not None or opts.budget is not None:
        raise TypeError("resume_guarded_dbos() continues the pause's own task and budget: no guard= or budget=")
    store = opts.store if opts.store is not None else default_store()
    who = opts.who

    async def claim() -> Any:
        return await claim_pause(agent, store, pause_id, decisions, who=who, why=why, task_id=opts.task_id)

    claimed, applied = await DBOS.run_step_async({"name": "agents_loopguard.claim_pause"}, claim)
    state = await decided_state(agent, claimed, applied, rejection_message=rejection_message)
    resumed = opts.continuing(None, task_id=claimed.task_id, budget=claimed.budget, store=store)
    runner = {"context": context, "max_turns": max_turns, "hooks": hooks, "run_config": run_config}
    return await run_guarded_dbos(agent, ClaimedState(state), options=resumed, **runner)
