"""The JSON API, version 1 (``/api/v1``): the operator's views and actions, and trigger activations for workflows.

Every route is a thin translation of :mod:`agents_loopguard.ops.operator` (tasks, pauses, decisions, stops,
reconciliation, recovery), of :mod:`agents_loopguard.ops.pages` (every list, a page at a time: ``next`` is the cursor
of the page after) or of :mod:`agents_loopguard.ops.workflows` (activations): request bodies become keyword
arguments, the authenticated token's name becomes ``who``, and the functions' errors become JSON with the status of
their family (400 bad input, 404 unknown id, 409 refused by state, 503 store). Scopes: ``operator`` for everything,
``workflow`` for the activations of its own flows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ..ops import operator, pages, workflows
from ..ops.probes import probe_operation
from ..store.base import Store
from ..values.budget import Budget
from ..values.errors import InputError
from ..values.probes import Probe
from .auth import Forbidden, api_caller, api_operator
from .config import Principal, ServerConfig

__all__ = ["router"]

router = APIRouter(prefix="/api/v1")
Operator = Annotated[Principal, Depends(api_operator)]
Caller = Annotated[Principal, Depends(api_caller)]
Text = Annotated[str, Field(max_length=2000)]
Id = Annotated[str, Field(min_length=1, max_length=400)]


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StopBody(_Body):
    """Why the task is stopped (the token's name is recorded as who)."""

    reason: Text = "operator"


class DecisionBody(_Body):
    """Decisions on a pause: ``decision`` for every pending call, or ``approve``/``reject`` lists of call ids."""

    decision: Literal["approve", "reject"] | None = None
    approve: list[Id] = Field(default_factory=list, max_length=1000)
    reject: list[Id] = Field(default_factory=list, max_length=1000)
    why: Text = ""


class ReconcileBody(_Body):
    """What the receiving system says about the operation, asked with its stable id."""

    answer: Literal["committed", "not_committed", "unknown"]
    why: Text = ""
    result: Any = None
    correct: bool = False
    """Correct the ledger when the receiver contradicts the operation's known state (recorded as such)."""


class RecoverBody(_Body):
    """A recorded decision to reopen a stopped or partial task, with an explicit extension of its limits."""

    why: Annotated[str, Field(min_length=1, max_length=2000)]
    more_turns: int = Field(default=0, ge=0, le=1_000_000)
    more_tools: int = Field(default=0, ge=0, le=1_000_000)


class BudgetBody(_Body):
    """The activation task's limits (a redelivered activation keeps its own)."""

    model_turns: int = Field(default=0, ge=0, le=1_000_000)
    tool_executions: int = Field(default=1, ge=0, le=1_000_000)


class WriteBody(_Body):
    """The write the workflow is about to make."""

    operation_id: Id
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    args: dict[str, Any] = Field(default_factory=dict)


class ActivationBody(_Body):
    """An event that activates the flow."""

    event_id: Id
    origin_operation_id: Annotated[str, Field(max_length=400)] | None = None
    parent_activation: Annotated[str, Field(max_length=400)] | None = None
    max_depth: int = Field(default=0, ge=0, le=10_000)
    budget: BudgetBody | None = None
    write: WriteBody | None = None


class FinishBody(_Body):
    """How the activation ended, and the effect of its reserved write."""

    ending: Literal["completed", "failed"] = "completed"
    effect: Literal["committed", "not_committed", "unknown"] | None = None
    result: Any = None
    detail: Text = ""


# --- tasks --------------------------------------------------------------------------------------------------------


Limit = Annotated[int, Query(ge=1, le=pages.MAX_PAGE, description="Rows on the page")]
Cursor = Annotated[str | None, Query(description="The `next` of the page before")]
Since = Annotated[str | None, Query(description="Updated after: ISO 8601 time, seconds, or an age (7d)")]
Until = Annotated[str | None, Query(description="Updated before: ISO 8601 time, seconds, or an age (30d)")]


@router.get("/tasks", tags=["tasks"], summary="Tasks, newest first, a page at a time")
def list_tasks(
    request: Request,
    _: Operator,
    status: Annotated[str | None, Query(description="running, or a terminal status")] = None,
    reason: Annotated[str | None, Query(description="The outcome's reason")] = None,
    family: Annotated[str | None, Query(description="The task's family")] = None,
    prefix: Annotated[str | None, Query(max_length=400, description="Task ids that start with this")] = None,
    updated_after: Since = None,
    updated_before: Until = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Tasks with their counters used, limits and left; filters combine; ``next`` is the cursor of the next page
    (``null`` on the last)."""
    return pages.task_page(
        _store(request),
        status=status or None,
        reason=reason or None,
        family=family or None,
        prefix=prefix or None,
        updated_after=updated_after or None,
        updated_before=updated_before or None,
        cursor=cursor,
        limit=limit,
    )


@router.get("/tasks/{task_id:path}", tags=["tasks"], summary="One task")
def show_task(
    request: Request,
    _: Operator,
    task_id: str,
    limit: Annotated[int | None, Query(ge=0, le=pages.MAX_PAGE)] = None,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Counters, budget left, the timeline (last ``limit`` steps; ``timeline_next``: the earlier ones), ledger
    operations, pauses, transitions."""
    return operator.task_view(_store(request), task_id, limit=limit, cursor=cursor)


@router.get("/operations", tags=["operations"], summary="The ledger, newest first, a page at a time")
def list_operations(
    request: Request,
    _: Operator,
    state: Annotated[str | None, Query(description="unknown, committed or not_committed")] = None,
    task_id: Annotated[str | None, Query(max_length=400)] = None,
    prefix: Annotated[str | None, Query(max_length=400)] = None,
    updated_after: Since = None,
    updated_before: Until = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Operations with their task, tool, state, result (redacted) and times; ``state=unknown`` lists the writes to
    reconcile."""
    return pages.operation_page(
        _store(request),
        state=state or None,
        task_id=task_id or None,
        prefix=prefix or None,
        updated_after=updated_after or None,
        updated_before=updated_before or None,
        cursor=cursor,
        limit=limit,
    )


@router.get("/transitions", tags=["tasks"], summary="Operators' transitions, newest first, a page at a time")
def list_transitions(
    request: Request,
    _: Operator,
    task_id: Annotated[str | None, Query(max_length=400)] = None,
    kind: Annotated[str | None, Query(description="resume, recover, reconcile, confirm, correct or stop")] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Who did what to which task, why and when (redacted)."""
    return pages.transition_page(
        _store(request), task_id=task_id or None, kind=kind or None, cursor=cursor, limit=limit
    )


@router.post("/tasks/{task_id:path}/stop", tags=["tasks"], summary="Set the stop mark")
def stop_task(request: Request, who: Operator, task_id: str, body: StopBody) -> dict[str, Any]:
    """Every later model call and tool execution of the task, by any worker, is refused; stop hooks run once."""
    return operator.stop_task(_store(request), task_id, reason=body.reason, who=who.name)


@router.post("/tasks/{task_id:path}/recover", tags=["tasks"], summary="Reopen a stopped or partial task")
def recover_task(request: Request, who: Operator, task_id: str, body: RecoverBody) -> dict[str, Any]:
    """A recorded decision; the limits grow by the explicit delta, the counters stay."""
    extend = {k: v for k, v in {"model_turns": body.more_turns, "tool_executions": body.more_tools}.items() if v}
    return operator.recover_task(_store(request), task_id, who=who.name, why=body.why, extend=extend)


@router.get("/records/{task_id:path}", tags=["tasks"], summary="The task's recovery record")
def task_record(request: Request, _: Operator, task_id: str) -> dict[str, Any]:
    """The stored recovery record, validated (409 while the task has no terminal outcome)."""
    return operator.task_record(_store(request), task_id)


@router.get("/operations/{operation_id:path}", tags=["operations"], summary="One ledger operation")
def show_operation(request: Request, _: Operator, operation_id: str) -> dict[str, Any]:
    """Its task, tool, state (unknown, committed, not_committed), stored result (redacted), attempts and times."""
    return operator.operation_view(_store(request), operation_id)


@router.post("/operations/{operation_id:path}/reconcile", tags=["operations"], summary="Record the receiver's answer")
def reconcile(request: Request, who: Operator, operation_id: str, body: ReconcileBody) -> dict[str, Any]:
    """For a write whose result is unknown: committed (with its result), not_committed, or still unknown."""
    return operator.reconcile_operation(
        _store(request), operation_id, body.answer, who=who.name, why=body.why, result=body.result, correct=body.correct
    )


@router.post("/operations/{operation_id:path}/probe", tags=["operations"], summary="Ask the receiver with the probe")
def probe(request: Request, who: Operator, operation_id: str) -> dict[str, Any]:
    """For a write whose result is unknown: run its tool's probe (the server's registry of probes) and record the
    receiver's answer as a reconciliation by the probe; ``unknown`` or a failed probe records nothing."""
    config: ServerConfig = request.app.state.config
    return probe_operation(_store(request), operation_id, _probes(config), who=who.name)


def _probes(config: ServerConfig) -> Mapping[str, Probe]:
    if not config.probes:
        raise InputError(
            "this server has no registry of probes: start it with `loopguard serve --probes package.module:attribute` "
            "(or LOOPGUARD_PROBES)"
        )
    return config.probes


# --- pauses -------------------------------------------------------------------------------------------------------


@router.get("/pauses", tags=["pauses"], summary="Pauses waiting for a decision, a page at a time")
def list_pauses(
    request: Request,
    _: Operator,
    status: Annotated[str, Query(description="pending (the default), decided or resumed")] = "pending",
    task_id: Annotated[str | None, Query(max_length=400)] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Pauses, oldest first, with their calls (arguments redacted) and their task's counters."""
    return pages.pause_page(_store(request), status=status, task_id=task_id or None, cursor=cursor, limit=limit)


@router.get("/pauses/{pause_id:path}", tags=["pauses"], summary="One pause")
def show_pause(request: Request, _: Operator, pause_id: str) -> dict[str, Any]:
    """Its pending calls with their decisions, the counters stored with it, its status and digest check."""
    return operator.pause_view(_store(request), pause_id)


@router.post("/pauses/{pause_id:path}/decisions", tags=["pauses"], summary="Approve or reject a pause's calls")
def decide(request: Request, who: Operator, pause_id: str, body: DecisionBody) -> dict[str, Any]:
    """Every pending call must be decided, and only those; the first decision wins (409 afterwards)."""
    return operator.decide_pause(
        _store(request),
        pause_id,
        who=who.name,
        approve=body.approve,
        reject=body.reject,
        approve_all=body.decision == "approve",
        reject_all=body.decision == "reject",
        why=body.why,
    )


# --- trigger activations ------------------------------------------------------------------------------------------


def _flow_caller(caller: Principal, flow: str) -> Principal:
    if not caller.may_use_flow(flow):
        raise Forbidden(f"token {caller.name!r} may not use flow {flow[:200]!r}")
    return caller


@router.post("/flows/{flow}/activations", tags=["activations"], summary="Ask before a workflow acts")
def start_activation(request: Request, caller: Caller, flow: str, body: ActivationBody) -> dict[str, Any]:
    """Record the activation and decide it (TriggerGuard): refused beyond ``max_depth`` re-entries of the flow's own
    effects; reserve its write in the ledger before it happens. ``act`` says whether to make the write now."""
    _flow_caller(caller, flow)
    budget = Budget(**body.budget.model_dump()) if body.budget else None
    write = workflows.Write(body.write.operation_id, body.write.tool, body.write.args) if body.write else None
    return workflows.start_activation(
        _store(request),
        flow=flow,
        event_id=body.event_id,
        origin_operation_id=body.origin_operation_id,
        parent_activation=body.parent_activation,
        max_depth=body.max_depth,
        budget=budget,
        write=write,
        may_use_flow=caller.may_use_flow,
    )


@router.post("/flows/{flow}/activations/{event_id:path}/finish", tags=["activations"], summary="Say how it ended")
def finish_activation(request: Request, caller: Caller, flow: str, event_id: str, body: FinishBody) -> dict[str, Any]:
    """Settle the reserved write from its effect and end the activation's task (twice: the stored outcome)."""
    _flow_caller(caller, flow)
    return workflows.finish_activation(
        _store(request),
        flow=flow,
        event_id=event_id,
        ending=body.ending,
        effect=body.effect,
        result=body.result,
        detail=body.detail,
    )


@router.get("/flows/{flow}/activations/{event_id:path}", tags=["activations"], summary="One activation's task")
def show_activation(request: Request, caller: Caller, flow: str, event_id: str) -> dict[str, Any]:
    """The activation's task: status, counters, its writes and their ledger states, its outcome."""
    _flow_caller(caller, flow)
    return workflows.activation_view(_store(request), flow=flow, event_id=event_id)


@router.get("/health", tags=["server"], summary="Is the server up (no token needed)")
def health() -> dict[str, Any]:
    """``{"ok": true}``; says nothing about the store or its tasks."""
    return {"ok": True}
