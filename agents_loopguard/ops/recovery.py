"""Recovery after a terminal outcome: reconcile an operation with an unknown result, or reopen a stopped task.

Both are explicit, recorded decisions (who, when, why) stored as transitions linked to the task's last outcome.
Neither resets a counter, and the :class:`~agents_loopguard.Guard` that ended stays ended: the next run builds a
new guard on the same task, which continues the same global budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..store.base import OperationRecord, OperationState, Store, TransitionRecord, operator_text
from ..values.canonical import redact
from ..values.errors import InputError, NotFoundError, StateError, StoreError
from ..values.outcome import NextAction, Status

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
    """The transition that reopened the task, if the answer reopened it (see :attr:`recorded` for every answer)."""
    allowed_next_actions: tuple[NextAction, ...]
    recorded: TransitionRecord | None = None
    """The transition that records the answer (reconcile, confirm or correct; None for an ``unknown`` answer,
    which records nothing)."""
    reopened_elsewhere: tuple[str, ...] = ()
    """Other tasks that waited on this operation (a replay that disagreed with the ledger), reopened by the answer."""

    @property
    def blocked(self) -> bool:
        """True while the operation's effect is still unknown (nothing may re-send it)."""
        return self.operation.state is OperationState.UNKNOWN

    @property
    def reopened(self) -> bool:
        """True when the answer reopened the task."""
        return self.transition is not None


_AFTER = {
    OperationState.COMMITTED: (NextAction.RETURN_RESULT, NextAction.HUMAN_REVIEW),
    OperationState.NOT_COMMITTED: (NextAction.BOUNDED_RETRY, NextAction.HUMAN_REVIEW),
    OperationState.UNKNOWN: (NextAction.QUERY_OPERATION_STATUS, NextAction.HUMAN_REVIEW),
}


def reconcile(
    store: Store,
    operation_id: str,
    answer: OperationState | str,
    *,
    who: str,
    why: str = "",
    result: Any = None,
    correct: bool = False,
    secrets: Iterable[str] = (),
    now: float | None = None,
) -> Reconciliation:
    """Record what the receiving system says about an operation, queried with its stable id.

    For an ``unknown`` operation:

    - ``committed`` (with its result): the result is stored and returned by any later identical call, and the task
      may continue;
    - ``not_committed`` (provably not executed): a retry is allowed within the remaining budget;
    - ``unknown`` (neither could be shown): the operation stays blocked and nothing is recorded.

    For an operation the ledger already knows (the ledger and the receiver may disagree, for example a committed
    write replayed while ``verify`` answered unknown):

    - the same answer confirms it (a ``confirm`` transition; a committed result is kept as stored);
    - another answer is refused, saying what disagrees, unless ``correct=True``: an operator states that the
      receiver is right (it never got the write, or it has it), and the ledger is corrected (a ``correct``
      transition with who and why; a correction to ``not_committed`` allows a retry).

    Every answer but ``unknown`` is recorded as a transition with who, why and the operation id, and reopens the
    task when it needs reconciliation and none of its operations is unknown any more. ``who``, ``why`` and the
    result are redacted before they are stored (credential patterns, and the ``secrets`` given).

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
    if state is OperationState.UNKNOWN and current.state is OperationState.UNKNOWN:
        return Reconciliation(current, None, _AFTER[state])
    kind = _kind(operation_id, current, state, correct=correct)
    stored = _answer_result(operation_id, current, state, result, secrets)
    who, why = (
        operator_text(who, secrets),
        operator_text(why, secrets) or f"operation {operation_id} {_VERB[kind]} {state}",
    )
    try:
        settled = store.settle_operation(
            operation_id, state, stored, expected=current.state, who=who, why=why, kind=kind, now=at
        )
    except StateError as exc:
        raise RecoveryRefused(str(exc)) from None
    reopening = settled.transition if settled.reopened else None
    waiting = _reopen_waiting(store, settled.operation, who=who, why=why, now=at)
    return Reconciliation(settled.operation, reopening, _AFTER[state], settled.transition, waiting)


def _reopen_waiting(store: Store, operation: OperationRecord, *, who: str, why: str, now: float) -> tuple[str, ...]:
    """Other tasks that ended needing reconciliation about this operation (a replay whose verify disagreed with
    the ledger) are reopened once the operation is known and nothing of theirs is unknown."""
    if operation.state is OperationState.UNKNOWN:
        return ()
    reopened = []
    for task in store.tasks():
        outcome = task.outcome or {}
        if (
            task.task_id == operation.task_id
            or task.status != str(Status.NEEDS_RECONCILIATION)
            or outcome.get("operation_id") != operation.operation_id
            or any(op.state is OperationState.UNKNOWN for op in store.operations(task.task_id))
        ):
            continue
        store.recover(task.task_id, who=who, why=why, kind="reconcile", now=now)
        reopened.append(task.task_id)
    return tuple(reopened)


_VERB = {"reconcile": "reconciled as", "confirm": "confirmed", "correct": "corrected to"}


def _kind(operation_id: str, current: OperationRecord, answer: OperationState, *, correct: bool) -> str:
    """Which transition an answer is: reconcile (of an unknown operation), confirm, or correct (with ``correct``)."""
    known = current.state
    if known is OperationState.UNKNOWN:
        return "reconcile"
    if answer is known:
        return "confirm"
    if answer is OperationState.UNKNOWN:
        raise RecoveryRefused(
            f"operation {operation_id!r} is already {known} in the ledger; an unknown answer changes nothing: "
            f"answer {known} to confirm it, or correct it with the receiver's answer"
        )
    if not correct:
        receiver = "never received it" if answer is OperationState.NOT_COMMITTED else "has it"
        raise RecoveryRefused(
            f"operation {operation_id!r} is already {known} in the ledger, but the answer is {answer}: the ledger "
            f"and the receiver disagree. If the receiver {receiver}, correct the ledger with correct=True "
            f"(recorded with who and why); if the ledger is right, answer {known} to confirm it"
        )
    return "correct"


def _answer_result(
    operation_id: str, current: OperationRecord, answer: OperationState, result: Any, secrets: Iterable[str]
) -> Any:
    """The result to store with the answer: the receiver's (redacted) for a committed one, none otherwise; a
    confirmation keeps the stored result (another one is refused)."""
    stored = redact(result, secrets=secrets) if result is not None else None
    if answer is not OperationState.COMMITTED:
        return None
    if current.state is OperationState.COMMITTED:
        if stored is not None and stored != current.result:
            raise RecoveryInputError(
                f"operation {operation_id!r} is committed with a stored result; a confirmation keeps it: pass no "
                "result (replays return what was stored)"
            )
        return current.result
    return stored


_RECOVERABLE = frozenset({str(Status.STOPPED), str(Status.PARTIAL), str(Status.NEEDS_RECONCILIATION)})


def recover(
    store: Store,
    task_id: str,
    *,
    who: str,
    why: str,
    extend: Mapping[str, Any] | None = None,
    secrets: Iterable[str] = (),
    now: float | None = None,
) -> TransitionRecord:
    """Reopen a ``stopped``, ``partial`` or ``needs_reconciliation`` task by an explicit decision, optionally
    extending its limits. ``who`` and ``why`` are redacted before they are stored (credential patterns, and the
    ``secrets`` given).

    ``extend`` is an explicit delta (``{"model_turns": 2}`` adds two turns; ``deadline`` replaces the deadline). The
    counters are never reset; the decision is stored as a ``recover`` transition linked to the last outcome.
    A task with an operation whose effect is still unknown must be reconciled first (a ``needs_reconciliation``
    task whose operations are all known may be recovered: the ledger already answers for them); one that needs a
    human goes through its pause.

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
    if status in ("running", str(Status.NEEDS_RECONCILIATION)):  # running: stopped by its mark, worker gone
        _refuse_unknown(store, task_id, task.outcome)
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
    who, why = operator_text(who, secrets), operator_text(why, secrets)
    return store.recover(task_id, who=who, why=why, kind="recover", budget_delta=delta, now=at)


def _refuse_unknown(store: Store, task_id: str, outcome: Mapping[str, Any] | None) -> None:
    """Refuse to recover a task while an operation of it (or the one its outcome names) is still unknown."""
    named = (outcome or {}).get("operation_id")
    unknown = [op.operation_id for op in store.operations(task_id) if op.state is OperationState.UNKNOWN]
    if isinstance(named, str) and named not in unknown:
        record = store.lookup_operation(named)
        if record is not None and record.state is OperationState.UNKNOWN:
            unknown.append(named)
    if unknown:
        raise RecoveryRefused(
            f"task {task_id!r} needs reconciliation: the effect of {', '.join(repr(u) for u in unknown)} is still "
            "unknown; query the receiver and reconcile() first"
        )
