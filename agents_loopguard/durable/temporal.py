"""An Agents SDK agent in a Temporal workflow, guarded inside Temporal's activities (temporalio 1.35 with
temporalio-openai-agents 1.1, which pins openai-agents 0.22).

Temporal's OpenAI Agents integration runs ``Runner.run`` in the workflow (code Temporal replays from its history
after a crash, on any worker) and every model call as an activity (``ModelActivity.invoke_model_activity``), which
resolves the model through the provider given to ``OpenAIAgentsPlugin(model_provider=...)`` on the worker. Tools are
activities too (``activity_as_tool``) or plain function tools run as workflow code. Which layer wraps which, from the
outside in:

* the workflow's model stub schedules the model activity (recorded in the history: a replay does not run it again);
* :class:`GuardedActivityModels`, the plugin's model provider, wraps the application's provider: inside the
  activity each model is a :class:`~agents_loopguard.sdk.GuardedModel` bound to the task's guarded run (the task
  defaults to the workflow id), keyed by ``workflow_id/run_id/activity_id`` (:class:`TemporalSteps`); a retried
  activity (``activity.info().attempt`` above 1: its worker died, or the attempt failed after the request left) is
  that request's attempt again, counted once more as it is sent again;
* a guard refusal inside the activity is a non-retryable ``ApplicationError`` (Temporal retries activities forever by
  default) carrying the verdict (:func:`refusal_of` reads it back in the workflow);
* :func:`guarded_activity` guards a tool activity's body the same way, keyed by the activity's identity (stable
  across the workflow's replays and the activity's retries): a write whose attempt died inside it is ``unknown`` in
  the ledger, and its retry is refused (non-retryable), never sent again.

Store I/O never runs in workflow code (Temporal replays it): the guard lives in the activities. In the workflow,
:func:`run_guarded_temporal` checks the agent's tools before anything runs (a plain function tool would run as
workflow code, outside the guard: refused with the fix, make it a guarded activity), runs the agent, and concludes
the task through the conclusion activity (:meth:`GuardedActivityModels.conclusion`): the task's one outcome is
stored (completed, partial, a refusal, an error), from the run's ending and the task's records (a done proved by a
tool activity's ``verify`` included), so every operator view shows it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from agents import Agent, FunctionTool, Handoff, Runner
from agents.models.interface import Model, ModelProvider
from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI
from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError
from typing_extensions import Unpack

from ..run import (
    NO_OUTPUT,
    Ending,
    Execute,
    Executed,
    GuardedRun,
    RunFields,
    RunOptions,
    ToolSpec,
    adrive,
    conclude,
    declare_tool,
    perform_check_async,
    within_deadline,
)
from ..run.durable import recorded, replay_of, replayed
from ..run.tool_calls import jsonable
from ..sdk import GuardedModel, LoopGuard
from ..values.calls import Verdict
from ..values.outcome import Outcome, Reason, RecoveryRecord
from ..values.probes import Probe

__all__ = [
    "CONCLUDE",
    "REFUSAL_TYPE",
    "TOOL_REFUSED",
    "GuardedActivityModels",
    "TemporalSteps",
    "check_tools",
    "guarded_activity",
    "refusal_of",
    "run_guarded_temporal",
]

REFUSAL_TYPE = "LoopGuardRefusal"
"""The ``type`` of the non-retryable ``ApplicationError`` a guard refusal inside an activity becomes."""
CONCLUDE = "agents_loopguard.conclude"
"""The name of the conclusion activity (:meth:`GuardedActivityModels.conclusion`)."""
_GUARDED = "__loopguard_activity__"
"""Set on a :func:`guarded_activity` body: :func:`check_tools` knows it from an activity nobody guarded."""
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class TemporalSteps:
    """Where Temporal is (:class:`~agents_loopguard.run.DurableSteps`), read from ``activity.info()``: the model call
    or tool execution an activity runs is keyed by the workflow id, its run id and the activity id (assigned by the
    workflow in order: the same on every replay and every retry of the activity).

    >>> TemporalSteps().model_step() is None   # outside an activity
    True
    """

    def _key(self) -> str | None:
        if not activity.in_activity():
            return None
        info = activity.info()
        return f"temporal:{info.workflow_id}:{info.workflow_run_id}:activity:{info.activity_id}"

    def model_step(self) -> str | None:
        return self._key()

    def tool_step(self, call_id: str | None) -> str | None:
        return self._key()  # the activity that runs the tool (an activity is not given the model's call id)


def non_retryable(halt: Exception) -> Exception:
    """The guard's halt inside an activity, as an error Temporal never retries; it carries the verdict.

    >>> error = non_retryable(RuntimeError("agents_loopguard stopped the run: stopped/model_budget"))
    >>> error.non_retryable, error.type
    (True, 'LoopGuardRefusal')
    """
    verdict = getattr(halt, "verdict", None)
    facts = json.dumps(recorded(None, None, verdict if isinstance(verdict, Verdict) else None, ended=True))
    error: Exception = ApplicationError(str(halt), facts, type=REFUSAL_TYPE, non_retryable=True)
    return error


def refusal_of(error: BaseException | None) -> Verdict | None:
    """The guard's verdict behind an exception the workflow's ``Runner.run`` raised (an ``ActivityError`` whose
    cause is the refusal, wrapped by the SDK or not), or ``None``: workflow code reads why the guard ended the run.

    >>> refusal_of(ValueError("unrelated")) is None
    True
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ApplicationError) and error.type == REFUSAL_TYPE and error.details:
            return replayed(json.loads(str(error.details[0])))[2]
        error = getattr(error, "cause", None) or error.__cause__
    return None


def _done_key(workflow_id: str) -> str:
    """The record of the validated done a tool activity proved (the conclusion restores it)."""
    return f"temporal:{workflow_id}:done"


def _activity_run(options: RunOptions) -> GuardedRun:
    """The task's guarded run inside the current activity (the task defaults to the workflow id)."""
    info = activity.info()
    opts = options
    if opts.guard is None and opts.task_id is None:
        opts = dataclasses.replace(opts, task_id=info.workflow_id)
    return GuardedRun.start(dataclasses.replace(opts, durable=TemporalSteps()))


class GuardedActivityModels(ModelProvider):
    """The model provider for ``OpenAIAgentsPlugin(model_provider=...)``: the application's provider (default:
    Temporal's own, an ``OpenAIProvider`` whose client does not retry), each model guarded inside the activity.

    The options are :func:`~agents_loopguard.sdk.run_guarded`'s (a ``store`` every worker shares, the ``budget``);
    ``task_id`` defaults to the workflow id, so all of a workflow's activities, on any worker, share its budget.
    """

    def __init__(
        self, inner: ModelProvider | None = None, *, options: RunOptions | None = None, **fields: Unpack[RunFields]
    ) -> None:
        self.inner = inner or OpenAIProvider(openai_client=AsyncOpenAI(max_retries=0))
        self.options = RunOptions.merge(options, fields)

    def get_model(self, model_name: str | None) -> Model:
        return GuardedModel(self.inner.get_model(model_name), _activity_run(self.options), refusal=non_retryable)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def conclusion(self) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        """The conclusion activity (named :data:`CONCLUDE`) with these options: register it on an activity worker
        (``Worker(..., activities=[..., models.conclusion()])``); :func:`run_guarded_temporal` calls it when the
        workflow's agent run ends, and it stores the task's outcome."""
        options = self.options

        async def conclude_run(ending: dict[str, Any]) -> dict[str, Any]:
            return await _conclude(options, ending)

        defined: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] = activity.defn(name=CONCLUDE)(conclude_run)
        return defined


async def _conclude(options: RunOptions, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The task's outcome from how the workflow's run ended (``facts``, see :func:`run_guarded_temporal`) and the
    task's records: a task that had ended returns its stored outcome, marked as a replay."""
    run = _activity_run(options)
    if run.guard.outcome is not None:
        return _record(replay_of(run.guard.outcome))
    done = run.kept_step(_done_key(activity.info().workflow_id))
    if done is not None:
        run.restore(done)
    verdict = replayed(facts["verdict"])[2] if facts.get("verdict") else None
    if verdict is not None:
        run.stop(verdict)
    error = facts.get("error")
    ending = Ending(
        output=facts.get("output", NO_OUTPUT),
        error=RuntimeError(error) if error else None,
        stopped_by=facts.get("stopped_by"),
        tool=facts.get("tool"),
        cancelled=bool(facts.get("cancelled")),
    )
    try:
        outcome = await adrive(conclude(run, ending), perform_check_async)
    except Exception:  # a programming error of the workflow's run: the task ended stopped/fatal, the workflow raises
        assert run.guard.outcome is not None, "a run that raised has ended its task"
        outcome = run.guard.outcome
    return _record(outcome)


def _record(outcome: Outcome) -> dict[str, Any]:
    record: dict[str, Any] = outcome.record().model_dump(mode="json")
    return record


def guarded_activity(
    *,
    kind: str = "read",
    operation_id: Callable[[dict[str, Any]], Any] | None = None,
    verify: Any = None,
    probe: Probe | None = None,
    options: RunOptions | Callable[[], RunOptions] | None = None,
    **fields: Unpack[RunFields],
) -> Callable[[F], F]:
    """Guard a tool activity's body (put it under ``@activity.defn``, then ``activity_as_tool``): each execution is
    reserved first, a write is named by ``operation_id(args)`` and checked by ``verify`` as with
    :func:`~agents_loopguard.sdk.guarded_tool`; a refusal is a non-retryable ``ApplicationError``. A write's
    ``probe`` asks the receiver when its answer was lost (a worker killed inside it: Temporal retries the activity).

    The options are :class:`GuardedActivityModels`' (the same store and task); ``options`` may be a function that
    returns them, called at each execution (a store the worker opens when it starts, after the decoration).
    """

    def wrap(fn: F) -> F:
        name = fn.__name__
        spec = declare_tool(name, kind=kind, operation_id=operation_id, verify=verify, probe=probe)  # type: ignore[arg-type]
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        async def body(*args: Any, **kwargs: Any) -> Any:
            run = _activity_run(RunOptions.merge(options() if callable(options) else options, fields))
            arguments = dict(signature.bind(*args, **kwargs).arguments)
            call = run.propose(spec, name, arguments)
            if isinstance(call, Executed):
                return _answer(run, call)
            executed = await _execute(run, spec, call, lambda: fn(*args, **kwargs))
            if run.done is not None:  # the task's validated done, for the conclusion (another activity)
                run.keep_step(_done_key(activity.info().workflow_id), recorded(None, None, None, done=run.done))
            return _answer(run, executed)

        setattr(body, _GUARDED, spec)
        return body  # type: ignore[return-value]

    return wrap


async def _execute(run: GuardedRun, spec: ToolSpec, call: Any, body: Callable[[], Any]) -> Executed:
    """The guarded run's execution of ``call`` inside the activity (the body awaited within the deadline)."""

    async def perform(effect: Any) -> Any:
        if isinstance(effect, Execute):
            value = body()
            return await within_deadline(value if inspect.isawaitable(value) else _ready(value), effect.timeout)
        return await perform_check_async(effect)

    executed: Executed = await adrive(run.execute(spec, call), perform)
    return executed


async def _ready(value: Any) -> Any:
    return value


def _answer(run: GuardedRun, executed: Executed) -> Any:
    """What the model reads, or the run's end (a verdict that ended the run) as a non-retryable error."""
    if executed.error is not None:
        raise executed.error
    if run.verdict is not None and executed.verdict is run.verdict:
        raise non_retryable(_Ended(run.verdict))
    return executed.output if executed.message is None else executed.message


class _Ended(Exception):
    def __init__(self, verdict: Verdict) -> None:
        super().__init__(f"agents_loopguard stopped the run: {verdict.status}/{verdict.reason}")
        self.verdict = verdict


# --- workflow code ----------------------------------------------------------------------------------------------


TOOL_REFUSED = "LoopGuardToolRefused"
"""The ``type`` of the non-retryable ``ApplicationError`` that refuses a tool the guard cannot reach in a workflow
(the workflow fails with the fix, before anything runs)."""


def _tool_refused(message: str) -> Exception:
    error: Exception = ApplicationError(message, type=TOOL_REFUSED, non_retryable=True)
    return error


def _activity_definition(tool: FunctionTool) -> Any:
    """The activity behind a tool made by ``activity_as_tool`` (its invoker closes over the activity's
    definition), or ``None``."""
    invoke = tool.on_invoke_tool
    if getattr(invoke, "__module__", "") != "temporalio.openai_agents.workflow":
        return None
    return inspect.getclosurevars(invoke).nonlocals.get("ret")


def _refusal_of_tool(tool: Any) -> str | None:
    """Why ``tool`` cannot run under the guard in a workflow (``None``: it can)."""
    name = getattr(tool, "name", type(tool).__name__)
    if not isinstance(tool, FunctionTool):
        return None  # a hosted tool runs at the model's provider, inside the guarded model request
    definition = _activity_definition(tool)
    if definition is None:
        return (
            f"tool {name!r} would run as workflow code, outside the guard (never reserved, run again on every "
            "replay; a sync def cannot even run in the workflow sandbox): make it an activity, "
            "@activity.defn over @guarded_activity(...), and give the agent activity_as_tool(that_activity)"
        )
    if getattr(getattr(definition, "fn", None), _GUARDED, None) is None:
        return (
            f"activity {definition.name!r} (tool {name!r}) is not guarded: put @guarded_activity(...) under its "
            "@activity.defn, so each execution is reserved inside the activity"
        )
    return None


def check_tools(agent: Agent[Any]) -> Agent[Any]:
    """Refuse (a non-retryable ``ApplicationError`` of type :data:`TOOL_REFUSED`) an agent graph whose tools the
    guard cannot reach in a Temporal workflow: a plain function tool (it runs as workflow code), an activity tool
    whose activity is not a :func:`guarded_activity`, an MCP server (its tools run in Temporal's own activities).
    Returns ``agent``. Pure: workflow code may call it (:func:`run_guarded_temporal` does, before anything runs).

    >>> from agents import Agent, function_tool
    >>> check_tools(Agent(name="a", tools=[function_tool(lambda: "x", name_override="plain")]))
    Traceback (most recent call last):
    ...
    temporalio.exceptions.ApplicationError: LoopGuardToolRefused: tool 'plain' would run as workflow code, ...
    """
    seen: set[int] = set()
    pending: list[Any] = [agent]
    while pending:
        current = pending.pop()
        if id(current) in seen or not isinstance(current, Agent):
            continue
        seen.add(id(current))
        for tool in current.tools:
            refusal = _refusal_of_tool(tool)
            if refusal is not None:
                raise _tool_refused(refusal)
        if current.mcp_servers:
            raise _tool_refused(
                f"agent {current.name!r} has MCP servers: their tools run in Temporal's own activities, outside "
                "the guard; wrap each MCP tool you need in a guarded activity"
            )
        pending += [h.agent if isinstance(h, Handoff) and hasattr(h, "agent") else h for h in current.handoffs]
    return agent


async def run_guarded_temporal(
    agent: Agent[Any],
    input: Any,
    *,
    conclusion: Mapping[str, Any] | None = None,
    **runner: Any,
) -> Outcome:
    """In workflow code: check the agent's tools (:func:`check_tools`), run it (``Runner.run``, which the plugin
    makes durable: every model call an activity), and conclude the task through the conclusion activity
    (:meth:`GuardedActivityModels.conclusion`), which stores the task's one outcome; return it.

    ``conclusion`` are ``workflow.execute_activity``'s options for that activity (default: a 30 s start-to-close
    timeout; give ``task_queue=`` when the activities run on another queue); ``runner`` goes to ``Runner.run``
    (``max_turns``, ``context``, ``run_config``...). A refusal by the guard ends the run with its outcome; a
    programming error of the run ends the task ``stopped/fatal`` and is re-raised (the workflow fails), as in every
    adapter. A task that had ended (an earlier workflow, or an earlier run of a continue-as-new chain, concluded it)
    runs nothing new: the outcome is the stored one, marked as a replay in its ``detail``.
    """
    check_tools(agent)
    facts: dict[str, Any]
    raised: BaseException | None = None
    try:
        result = await Runner.run(agent, input, **runner)
    except asyncio.CancelledError:
        await _concluded({"cancelled": True}, conclusion)
        raise
    except Exception as exc:
        facts, raised = _error_facts(exc), exc
    else:
        facts = {"output": jsonable(result.final_output)}
    outcome = await _concluded(facts, conclusion)
    if raised is not None and outcome.reason is Reason.FATAL and not facts.get("verdict"):
        raise raised
    return outcome


def _error_facts(error: BaseException) -> dict[str, Any]:
    """How a run that raised ended, as the conclusion activity reads it (an exception does not cross to it)."""
    verdict = refusal_of(error)
    if verdict is not None:
        return {"verdict": recorded(None, None, verdict, ended=True), "error": str(error)}
    ending = LoopGuard.ending_of(error)
    facts: dict[str, Any] = {"error": f"{type(error).__name__}: {error}"}
    if ending.stopped_by is not None:
        facts.update(stopped_by=ending.stopped_by, tool=ending.tool)
    return facts


async def _concluded(facts: dict[str, Any], options: Mapping[str, Any] | None) -> Outcome:
    """The conclusion activity's answer, as the task's :class:`~agents_loopguard.Outcome`."""
    settings = {"start_to_close_timeout": timedelta(seconds=30), **(options or {})}
    record = await workflow.execute_activity(CONCLUDE, facts, **settings)
    return RecoveryRecord.from_json(record).to_outcome()
