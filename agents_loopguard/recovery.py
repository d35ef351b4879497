"""Recovery after a terminal outcome: reconcile an operation with an unknown result, or reopen a stopped task.

Both are explicit, recorded decisions (who, when, why) stored as transitions linked to the task's last outcome.
Neither resets a counter, and the :class:`~agents_loopguard.core.Guard` that ended stays ended: the next run builds a
new guard on the same task, which continues the same global budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .canonical import redact
from .errors import InputError, NotFoundError, StateError, StoreError
from .outcome import NextAction, Status
from .store.base import OperationRecord, OperationState, Store, TransitionRecord

__all__ = [
    "Reconciliation",
    "RecoveryError",
    "RecoveryInputError",
    "RecoveryNotFound",
    "RecoveryRefused",
    "reconcile",
    "recover",
]


class RecoveryError(StoreError):
    """A recovery decision that cannot be recorded as asked (the message says what to do instead)."""


class RecoveryRefused(RecoveryError, StateError):
    """The task's or the operation's state does not allow this decision."""


class RecoveryNotFound(RecoveryError, NotFoundError):
    """No such task or operation in this store."""


class RecoveryInputError(RecoveryError, InputError):
    """The decision itself is malformed (no who/why, a budget extension that shrinks a limit...)."""


@dataclass(frozen=True)
class Reconciliation:
    """What a reconciliation recorded and what may happen next."""

    operation: OperationRecord
    """The operation after the answer was recorded."""
    transition: TransitionRecord | None
    """The ``reconcile`` transition that reopened the task, if it was reopened."""
    allowed_next_actions: tuple[NextAction, ...]

    @property
    def blocked(self) -> bool:
        """True while the operation's effect is still unknown (nothing may re-send it)."""
        return self.operation.state is OperationState.UNKNOWN


def reconcile(
    store: Store,
    operation_id: str,
    answer: OperationState | str,
    *,
    who: str,
    why: str = "",
    result: Any = None,
    secrets: Iterable[str] = (),
    now: float | None = None,
) -> Reconciliation:
    """Record what the receiving system says about an ``unknown`` operation, queried with its stable id.

    - ``committed`` (with its result): the result is stored and returned by any later identical call, and the task
      may continue;
    - ``not_committed`` (provably not executed): a retry is allowed within the remaining budget;
    - ``unknown`` (neither could be shown): the operation stays blocked and the task stays as it is.

    The task is reopened (a ``reconcile`` transition) once none of its operations is unknown any more.

    >>> from agents_loopguard import Budget, MemoryStore, create_runner
    >>> store = MemoryStore()
    >>> def lost(call): raise TimeoutError("no response")
    >>> pay = {"tool": "pay", "kind": "write", "operation_id": "inv-7", "args": {"amount": 5}}
    >>> run = create_runner(budget=Budget(model_turns=3, tool_executions=3), store=store, task_id="t-7",
    ...                     execute=lost, verify=lambda c, r: None)
    >>> run([pay]).status
    <Status.NEEDS_RECONCILIATION: 'needs_reconciliation'>
    >>> rec = reconcile(store, "inv-7", "committed", who="ops@example", result={"status": "ok", "receipt": "r-9"})
    >>> rec.operation.state, rec.transition.kind, [str(a) for a in rec.allowed_next_actions]
    (<OperationState.COMMITTED: 'committed'>, 'reconcile', ['return_result', 'human_review'])
    """
    state = OperationState(answer)
    at = time.time() if now is None else now
    current = store.lookup_operation(operation_id)
    if current is None:
        raise RecoveryNotFound(f"unknown operation {operation_id!r}: check the id (it is the business operation id)")
    if current.state is not OperationState.UNKNOWN:
        raise RecoveryRefused(
            f"operation {operation_id!r} is already {current.state}: only an unknown operation is reconciled"
        )
    if state is OperationState.UNKNOWN:
        return Reconciliation(current, None, (NextAction.QUERY_OPERATION_STATUS, NextAction.HUMAN_REVIEW))
    stored = redact(result, secrets=secrets) if result is not None else None
    record = store.reconcile_operation(operation_id, state, stored, now=at)
    transition = None
    task = store.task(record.task_id)
    still_unknown = [op for op in store.operations(record.task_id) if op.state is OperationState.UNKNOWN]
    if task is not None and task.status != "running" and not still_unknown:
        detail = f"operation {operation_id} reconciled as {state}"
        transition = store.recover(record.task_id, who=who, why=why or detail, kind="reconcile", now=at)
    if state is OperationState.COMMITTED:
        actions = (NextAction.RETURN_RESULT, NextAction.HUMAN_REVIEW)
    else:
        actions = (NextAction.BOUNDED_RETRY, NextAction.HUMAN_REVIEW)
    return Reconciliation(record, transition, actions)


_RECOVERABLE = frozenset({str(Status.STOPPED), str(Status.PARTIAL)})


def recover(
    store: Store,
    task_id: str,
    *,
    who: str,
    why: str,
    extend: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> TransitionRecord:
    """Reopen a ``stopped`` or ``partial`` task by an explicit decision, optionally extending its limits.

    ``extend`` is an explicit delta (``{"model_turns": 2}`` adds two turns; ``deadline`` replaces the deadline). The
    counters are never reset; the decision is stored as a ``recover`` transition linked to the last outcome.
    A task that needs reconciliation must be reconciled first; one that needs a human goes through its pause.

    >>> from agents_loopguard import Budget, Guard, MemoryStore, Reason, Status
    >>> store = MemoryStore()
    >>> guard = Guard(budget=Budget(model_turns=1, tool_executions=1), store=store, task_id="t-1")
    >>> _ = guard.finish(Status.STOPPED, Reason.MODEL_BUDGET)
    >>> t = recover(store, "t-1", who="lead@example", why="productive run, 2 more turns", extend={"model_turns": 2})
    >>> store.task("t-1").budget.model_turns, store.task("t-1").status, t.from_outcome["reason"]
    (3, 'running', 'model_budget')
    """
    if not who or not why:
        raise RecoveryInputError("a recovery is a recorded decision: say who decides and why")
    task = store.task(task_id)
    if task is None:
        raise RecoveryNotFound(f"unknown task {task_id!r}")
    status = task.status
    if status == "running" and task.stop_reason is None:
        raise RecoveryRefused(f"task {task_id!r} is running: there is nothing to recover")
    if status == str(Status.NEEDS_RECONCILIATION):
        raise RecoveryRefused(f"task {task_id!r} needs reconciliation: query the receiver and reconcile() first")
    if status == str(Status.NEEDS_HUMAN):
        raise RecoveryRefused(f"task {task_id!r} waits for a human: decide on its pause instead")
    if status == str(Status.COMPLETED):
        raise RecoveryRefused(f"task {task_id!r} is completed: return its result; there is nothing to recover")
    if status != "running" and status not in _RECOVERABLE:
        raise RecoveryRefused(f"task {task_id!r} has status {status!r}, which cannot be recovered")
    delta = dict(extend or {})
    try:
        task.budget.extended(delta)  # validate before anything is written
    except ValueError as exc:
        raise RecoveryInputError(str(exc)) from exc
    at = time.time() if now is None else now
    return store.recover(task_id, who=who, why=why, kind="recover", budget_delta=delta, now=at)
