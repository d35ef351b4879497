"""Trigger activations for workflows that are not Python (n8n, a shell script...): :class:`TriggerGuard` over HTTP.

A workflow asks before it acts and says how it ended, in two requests; nothing is kept in the server's memory
between them, so any server process on the same store can answer either:

1. :func:`start_activation`: ``TriggerGuard.activate`` records the activation (``<flow>:<event id>``) and decides it:
   an activation caused by the flow's own write beyond ``max_depth`` re-entries is refused (``stopped/trigger_chain``,
   recorded as a finished task, exactly as from Python); the same event delivered twice is one activation. A granted
   activation gets its task (``TriggerGuard.guard``) and, when the workflow names the write it is about to make
   (operation id, tool, arguments), the write is reserved in the ledger as ``unknown`` before it happens, in the flow's
   namespace (``flow:<flow>:<operation id>``: it can never be a task's operation, R18): a committed
   operation is answered with its stored result (``act`` false: do not write again), an unknown one is refused
   (``needs_reconciliation``), another payload under the same id is a conflict.
2. :func:`finish_activation`: the workflow reports the write's effect (``committed``, ``not_committed`` or
   ``unknown``) and whether it completed; the reserved write is settled in the ledger from that report and the
   activation's task ends with one outcome. Finishing twice answers the stored outcome.

The chain follows the ledger: the workflow stamps what it writes with the operation id (a ``written_by`` column),
and the change event carries it back as ``origin_operation_id``. ``parent_activation`` names the activation instead,
when that is what the event carries; it stands for that activation's writes.

>>> from agents_loopguard import MemoryStore
>>> store = MemoryStore()
>>> write = Write("order-42:v2", "save_order", {"order": 42, "version": 2})
>>> first = start_activation(store, flow="orders-sync", event_id="evt-1", write=write)
>>> first["allowed"], first["act"], first["activation_id"], first["write"]["operation_id"]
(True, True, 'orders-sync:evt-1', 'flow:orders-sync:order-42:v2')
>>> finish_activation(store, flow="orders-sync", event_id="evt-1", effect="committed")["outcome"]["status"]
'completed'
>>> echo = start_activation(store, flow="orders-sync", event_id="evt-2", origin_operation_id=write.operation_id)
>>> echo["allowed"], echo["reason"], echo["depth"]
(False, 'trigger_chain', 1)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..store.base import Activation, Store
from ..values.budget import Budget
from ..values.errors import InputError, NotFoundError, StateError
from ..values.outcome import Outcome, RecordError
from .triggers import TriggerGuard

__all__ = ["DEFAULT_BUDGET", "Write", "activation_view", "finish_activation", "start_activation"]

DEFAULT_BUDGET = Budget(model_turns=0, tool_executions=1)
"""An activation's task, unless the workflow asks for more: no model turns, one write."""
Effect = Literal["committed", "not_committed", "unknown"]
Ending = Literal["completed", "failed"]


@dataclass(frozen=True)
class Write:
    """The write a workflow is about to make: its stable business id, the tool's name, its arguments."""

    operation_id: str
    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)


def _trigger(store: Store, flow: str, max_depth: int, clock: Callable[[], float]) -> TriggerGuard:
    try:
        return TriggerGuard(store, flow=flow, max_depth=max_depth, clock=clock)
    except ValueError as exc:
        raise InputError(str(exc)) from exc


def _activation(store: Store, task_id: str, may_use_flow: Callable[[str], bool]) -> Activation:
    """The recorded activation ``task_id`` of a flow the caller may use (R18: no other task is the caller's)."""
    found = store.activation(task_id)
    if found is None or not may_use_flow(found.flow):
        raise NotFoundError(f"no activation {task_id!r} in this store")
    return found


def _origin(
    store: Store, origin_operation_id: str | None, parent_activation: str | None, may_use_flow: Callable[[str], bool]
) -> str | None:
    """The operation that caused the event: given, or a write of the parent activation (any: they share a chain)."""
    origin, parent = origin_operation_id or None, parent_activation or None  # "" from a form means absent
    if origin and parent:
        raise InputError("give origin_operation_id or parent_activation, not both")
    if parent is None:
        return origin
    _activation(store, parent, may_use_flow)
    writes = store.operations(parent)
    if not writes:
        raise InputError(
            f"activation {parent!r} recorded no write, so no event can be its effect; "
            "reserve the flow's writes when it starts (write=...) or pass origin_operation_id"
        )
    return max(writes, key=lambda op: (op.created_at, op.operation_id)).operation_id


def _answer(
    activation: Activation,
    event_id: str,
    *,
    allowed: bool,
    act: bool = False,
    outcome: Outcome | None = None,
    write: dict[str, Any] | None = None,
) -> dict[str, Any]:
    record = outcome.record().to_dict() if outcome is not None else None
    return {
        "activation_id": activation.activation_id,
        "flow": activation.flow,
        "event_id": event_id,
        "allowed": allowed,
        "act": act,
        "duplicate": activation.duplicate,
        "depth": activation.depth,
        "chain_id": activation.chain_id,
        "origin_operation_id": activation.origin_operation_id,
        "reason": str(outcome.reason) if outcome is not None else None,
        "detail": outcome.detail if outcome is not None else "",
        "write": write,
        "outcome": record,
    }


def start_activation(
    store: Store,
    *,
    flow: str,
    event_id: str,
    origin_operation_id: str | None = None,
    parent_activation: str | None = None,
    max_depth: int = 0,
    budget: Budget | None = None,
    write: Write | None = None,
    secrets: Iterable[str] = (),
    clock: Callable[[], float] = time.time,
    may_use_flow: Callable[[str], bool] = lambda flow: True,
) -> dict[str, Any]:
    """Record and decide an activation of ``flow``; reserve its write before it happens (see the module).

    The answer: ``allowed`` (may the flow run), ``act`` (may it make its write now: false for a refusal and for a
    write the ledger already holds as committed, whose stored result is in ``write.result``), ``reason`` and
    ``outcome`` for a refused or already finished activation, and the chain (``depth``, ``chain_id``). The write is
    reserved in the flow's namespace (``write.operation_id`` is the ledger's id: stamp that one on what it changes).
    ``may_use_flow`` is the caller's scope: a ``parent_activation`` of another flow is not found.
    """
    trigger = _trigger(store, flow, max_depth, clock)
    origin = _origin(store, origin_operation_id, parent_activation, may_use_flow)
    try:
        entry = trigger.activate(event_id, origin_operation_id=origin)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if isinstance(entry, Outcome):  # refused, or an event already handled: the row says which chain it was
        recorded = store.activate(
            flow, trigger.activation_id(event_id), origin_operation_id=origin, max_depth=max_depth, now=clock()
        )
        return _answer(recorded, event_id, allowed=False, outcome=entry)
    if write is None:
        ended = trigger.guard(entry, budget=budget or DEFAULT_BUDGET, secrets=secrets).outcome  # the task exists now
        if ended is not None:  # a task of that id ended already (written outside the trigger)
            return _answer(entry, event_id, allowed=False, outcome=ended)
        return _answer(entry, event_id, allowed=True, act=True)
    reserved = trigger.reserve_write(
        entry,
        operation_id=write.operation_id,
        tool=write.tool,
        args=write.args,
        budget=budget or DEFAULT_BUDGET,
        secrets=secrets,
    )
    answer = {"operation_id": reserved.operation_id, "replay": reserved.replay, "result": reserved.result}
    if reserved.outcome is not None:  # refused before anything ran, or ended already
        return _answer(entry, event_id, allowed=False, outcome=reserved.outcome, write={**answer, "replay": False})
    return _answer(entry, event_id, allowed=True, act=not reserved.replay, write=answer)


def _stored_outcome(trigger: TriggerGuard, task_id: str) -> Outcome | None:
    try:
        return trigger.finished(task_id)
    except RecordError as exc:
        raise StateError(f"activation {task_id!r}: {exc}") from exc


def finish_activation(
    store: Store,
    *,
    flow: str,
    event_id: str,
    ending: Ending = "completed",
    effect: Effect | None = None,
    result: Any = None,
    detail: str = "",
    secrets: Iterable[str] = (),
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """End an activation of ``flow`` with the workflow's report; settle its reserved write. Twice: the stored outcome.

    With a reserved write, ``effect`` is required: ``committed`` (its result is stored and returned to any later
    identical write), ``not_committed`` (it may be retried), ``unknown`` (``needs_reconciliation``: nothing sends
    it again until someone asks the receiver). ``ending="failed"`` ends a write-less activation
    ``stopped/executor_exception``, with ``detail``.
    """
    trigger = _trigger(store, flow, 0, clock)
    task_id = trigger.activation_id(event_id)
    _activation(store, task_id, lambda recorded: recorded == flow)
    stored = _stored_outcome(trigger, task_id)
    if stored is not None:
        return {"activation_id": task_id, "already_finished": True, "outcome": stored.record().to_dict()}
    outcome = trigger.finish(
        task_id, completed=ending == "completed", effect=effect, result=result, detail=detail, secrets=secrets
    )
    return {"activation_id": task_id, "already_finished": False, "outcome": outcome.record().to_dict()}


def activation_view(store: Store, *, flow: str, event_id: str) -> dict[str, Any]:
    """The activation's task: status, counters against limits, its writes and their ledger states, its outcome."""
    task_id = _trigger(store, flow, 0, time.time).activation_id(event_id)
    _activation(store, task_id, lambda recorded: recorded == flow)
    snapshot = store.task(task_id)
    if snapshot is None:
        raise NotFoundError(f"no activation {task_id!r} in this store")
    return {
        "activation_id": task_id,
        "flow": flow,
        "event_id": event_id,
        "status": snapshot.status,
        "used": {"models": snapshot.used.models, "tools": snapshot.used.tools},
        "limits": {"model_turns": snapshot.budget.model_turns, "tool_executions": snapshot.budget.tool_executions},
        "writes": [
            {"operation_id": op.operation_id, "tool": op.tool, "state": str(op.state)}
            for op in store.operations(task_id)
        ],
        "outcome": snapshot.outcome,
    }
