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

Store I/O never runs in workflow code (Temporal replays it): the guard lives in the activities. Not covered here: the
task's outcome is not concluded by this module (the workflow reads the refusal with :func:`refusal_of`); a done
proved by a tool activity's ``verify`` is that activity's, and plain function tools run as workflow code are not
guarded (see docs/durable.md).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agents.models.interface import Model, ModelProvider
from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI
from temporalio import activity
from temporalio.exceptions import ApplicationError
from typing_extensions import Unpack

from ..run import (
    Execute,
    Executed,
    GuardedRun,
    RunFields,
    RunOptions,
    ToolSpec,
    adrive,
    declare_tool,
    perform_check_async,
    within_deadline,
)
from ..run.durable import recorded, replayed
from ..sdk import GuardedModel
from ..values.calls import Verdict

__all__ = ["REFUSAL_TYPE", "GuardedActivityModels", "TemporalSteps", "guarded_activity", "refusal_of"]

REFUSAL_TYPE = "LoopGuardRefusal"
"""The ``type`` of the non-retryable ``ApplicationError`` a guard refusal inside an activity becomes."""
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


def guarded_activity(
    *,
    kind: str = "read",
    operation_id: Callable[[dict[str, Any]], Any] | None = None,
    verify: Any = None,
    options: RunOptions | Callable[[], RunOptions] | None = None,
    **fields: Unpack[RunFields],
) -> Callable[[F], F]:
    """Guard a tool activity's body (put it under ``@activity.defn``, then ``activity_as_tool``): each execution is
    reserved first, a write is named by ``operation_id(args)`` and checked by ``verify`` as with
    :func:`~agents_loopguard.sdk.guarded_tool`; a refusal is a non-retryable ``ApplicationError``.

    The options are :class:`GuardedActivityModels`' (the same store and task); ``options`` may be a function that
    returns them, called at each execution (a store the worker opens when it starts, after the decoration).
    """

    def wrap(fn: F) -> F:
        name = fn.__name__
        spec = declare_tool(name, kind=kind, operation_id=operation_id, verify=verify)  # type: ignore[arg-type]
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        async def body(*args: Any, **kwargs: Any) -> Any:
            run = _activity_run(RunOptions.merge(options() if callable(options) else options, fields))
            arguments = dict(signature.bind(*args, **kwargs).arguments)
            call = run.propose(spec, name, arguments)
            if isinstance(call, Executed):
                return _answer(run, call)
            return _answer(run, await _execute(run, spec, call, lambda: fn(*args, **kwargs)))

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
