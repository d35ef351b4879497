"""The store's refusal rules, written once: whether a reservation is refused, why, and in what words.

Each rule is a pure function of what the store holds for a task (its limits, counters, revision, status and stop
mark) and, for a tool execution, of how often the same call already ran at that revision. Every backend answers
with these words: :class:`~agents_loopguard.store.memory.MemoryStore` calls them to *decide*;
:class:`~agents_loopguard.store.sql.SQLStore` decides in one conditional SQL statement (atomic across workers) and
calls them on the row that statement saw to *explain* a refusal. The SQL conditions are these rules, so when a
rule finds nothing to refuse on that row, the statement lost a race and runs again.

The order is part of the rule: the stop mark (or a finished task) first, then the repetition of the same call (or
the wait policy of a poll), then the tool's own limit (``tool_limit``), then the task's budget.

The operator steps (reconcile an operation, decide or claim a pause, recover a task) are refused by the state of
what they name; those refusals are errors of the right family, also worded once here (the ``check_*`` functions).

>>> from agents_loopguard import Budget
>>> task = TaskState(Budget(model_turns=2, tool_executions=1), Usage(models=2))
>>> turn_refusal(task).detail
'the task has no model turns left (2 of 2 used)'
>>> execution_refusal(task, 2, 0.0, max_repeats=2).detail
'the same call already ran 2 times at revision 0 (allowed: 2)'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..values.budget import Budget
from ..values.errors import InputError, NotFoundError, StateError
from ..values.outcome import Reason, Usage
from .base import Grant, OperationRecord, OperationState, PauseAlreadyResumed, PauseRecord

__all__ = [
    "WAITED_PAST_MAX_WAIT",
    "TaskState",
    "TaskView",
    "check_answer",
    "check_claim",
    "check_decide",
    "check_reconcile",
    "check_recover",
    "check_tokens",
    "cost_refusal",
    "execution_refusal",
    "progressed",
    "reopens",
    "stop_refusal",
    "token_refusal",
    "turn_refusal",
    "unknown_step",
    "unknown_task",
]

WAITED_PAST_MAX_WAIT = "waited past max_wait"
"""The detail of a poll refused because its job stayed pending longer than the wait policy allows."""


class TaskView(Protocol):
    """What the rules read of a task; a :class:`~agents_loopguard.store.base.TaskSnapshot` is one."""

    @property
    def budget(self) -> Budget:
        """The limits (the rules read model_turns, tool_executions, cost and the token limits)."""

    @property
    def used(self) -> Usage:
        """The counters."""

    @property
    def revision(self) -> int:
        """The validated revision."""

    @property
    def status(self) -> str:
        """``running`` or the terminal status."""

    @property
    def stop_reason(self) -> str | None:
        """The stop mark, if set."""


@dataclass(frozen=True, slots=True)
class TaskState:
    """A :class:`TaskView` made of plain values (what a store builds from a row it read).

    >>> TaskState(Budget(model_turns=1, tool_executions=1)).status
    'running'
    """

    budget: Budget
    used: Usage = field(default_factory=Usage)
    revision: int = 0
    status: str = "running"
    stop_reason: str | None = None


def _refused(task: TaskView, reason: Reason, detail: str) -> Grant:
    return Grant(False, reason, task.used, task.revision, detail)


def stop_refusal(task: TaskView) -> Grant | None:
    """The refusal of every reservation of a task that carries a stop mark (``stop_requested``) or has finished
    (``task_finished``).

    >>> stop_refusal(TaskState(Budget(1, 1), stop_reason="operator")).detail
    'stop mark: operator'
    >>> stop_refusal(TaskState(Budget(1, 1), status="partial")).detail
    'task already partial'
    >>> stop_refusal(TaskState(Budget(1, 1))) is None
    True
    """
    if task.stop_reason is not None:
        return _refused(task, Reason.STOP_REQUESTED, f"stop mark: {task.stop_reason}")
    if task.status != "running":  # ended by another worker (or an earlier run): not a stop mark
        return _refused(task, Reason.TASK_FINISHED, f"task already {task.status}")
    return None


def progressed(revision: int, stalled: int, verified: int | None, *, pending: bool = False) -> tuple[int, int]:
    """The task's (revision, stalled) after a result: a verified revision above the task's advances it and ends the
    stall; a verified result that does not advance it is one more stall, unless it is a pending poll; an
    unverified result (``verified`` None) moves nothing. The SQL progress statements are this rule.

    >>> progressed(3, 1, 4), progressed(3, 1, 3), progressed(3, 1, 2, pending=True), progressed(3, 1, None)
    ((4, 0), (3, 2), (3, 1), (3, 1))
    """
    if verified is None:
        return revision, stalled
    if verified > revision:
        return verified, 0
    return revision, stalled if pending else stalled + 1


def turn_refusal(task: TaskView) -> Grant | None:
    """Why one more model turn is refused (stop_requested, model_budget), or None when it may be reserved.

    >>> turn_refusal(TaskState(Budget(model_turns=1, tool_executions=0))) is None
    True
    """
    refusal = stop_refusal(task)
    if refusal is not None:
        return refusal
    used, limit = task.used.models, task.budget.model_turns
    if used >= limit:
        return _refused(task, Reason.MODEL_BUDGET, f"the task has no model turns left ({used} of {limit} used)")
    return None


def execution_refusal(
    task: TaskView,
    repeats: int,
    first_at: float | None,
    *,
    max_repeats: int,
    now: float = 0.0,
    poll: bool = False,
    max_wait: float | None = None,
    tool_limit: tuple[str, int] | None = None,
    tool_runs: int = 0,
) -> Grant | None:
    """Why one more execution of a call is refused, or None when it may be reserved.

    ``repeats`` is how many times the same fingerprint already ran at the task's revision, ``first_at`` when it
    first did; ``tool_runs`` how many times the tool of ``tool_limit`` (name, max executions per task) already ran.
    In order: stop_requested; same_call (wait_budget for a poll) once it ran ``max_repeats`` times; for a poll with
    ``max_wait``, wait_budget once ``now - first_at`` reached it; tool_limit once the tool ran its maximum;
    tool_budget when no execution is left.

    >>> task = TaskState(Budget(model_turns=0, tool_executions=5), revision=3)
    >>> execution_refusal(task, 1, 0.0, max_repeats=10, now=30.0, poll=True, max_wait=30.0).detail
    'waited past max_wait'
    >>> execution_refusal(task, 10, 0.0, max_repeats=10, poll=True).detail
    'the job is still pending after 10 polls at revision 3 (allowed: 10)'
    >>> execution_refusal(task, 0, None, max_repeats=2, tool_limit=("send_email", 3), tool_runs=3).detail
    "the tool 'send_email' already ran 3 times in this task (allowed: 3)"
    """
    refusal = stop_refusal(task)
    if refusal is not None:
        return refusal
    revision = task.revision
    if repeats >= max_repeats:
        if poll:
            detail = f"the job is still pending after {repeats} polls at revision {revision} (allowed: {max_repeats})"
            return _refused(task, Reason.WAIT_BUDGET, detail)
        detail = f"the same call already ran {repeats} times at revision {revision} (allowed: {max_repeats})"
        return _refused(task, Reason.SAME_CALL, detail)
    if poll and max_wait is not None and repeats and first_at is not None and now - first_at >= max_wait:
        return _refused(task, Reason.WAIT_BUDGET, WAITED_PAST_MAX_WAIT)
    if tool_limit is not None and tool_runs >= tool_limit[1]:
        tool, allowed = tool_limit
        return _refused(
            task,
            Reason.TOOL_LIMIT,
            f"the tool {tool!r} already ran {tool_runs} times in this task (allowed: {allowed})",
        )
    used, limit = task.used.tools, task.budget.tool_executions
    if used >= limit:
        return _refused(task, Reason.TOOL_BUDGET, f"the task has no tool executions left ({used} of {limit} used)")
    return None


def cost_refusal(task: TaskView, amount: float) -> Grant | None:
    """Why reserving ``amount`` of money is refused (stop_requested, cost_budget), or None when it fits.

    A reservation fits when ``used + amount <= limit`` (a task without a cost limit always fits).

    >>> cost_refusal(TaskState(Budget(1, 1, cost=1.0), Usage(cost=0.75)), 0.5).detail
    'reserving 0.5 would exceed the cost budget (1; used 0.75)'
    """
    refusal = stop_refusal(task)
    if refusal is not None:
        return refusal
    used, limit = task.used.cost, task.budget.cost
    if limit is not None and not used + amount <= limit:  # "not <=": NaN does not fit either, as in SQL
        return _refused(
            task,
            Reason.COST_BUDGET,
            f"reserving {amount:.6g} would exceed the cost budget ({limit:.6g}; used {used:.6g})",
        )
    return None


def check_tokens(input_tokens: int, output_tokens: int) -> tuple[int, int]:
    """Token amounts to reserve or settle: non-negative ints (a bad amount is an error, never a silent zero).

    >>> check_tokens(-1, 5)
    Traceback (most recent call last):
    agents_loopguard.values.errors.InputError: token amounts are non-negative ints, got input=-1 output=5
    """
    for value in (input_tokens, output_tokens):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(
                f"token amounts are non-negative ints, got input={input_tokens!r} output={output_tokens!r}"
            )
    return input_tokens, output_tokens


def token_refusal(task: TaskView, input_tokens: int, output_tokens: int) -> Grant | None:
    """Why reserving tokens is refused (stop_requested, token_budget), or None when they fit every token limit.

    In order: the input limit, the output limit, the total (input and output together); a missing limit always fits.

    >>> task = TaskState(Budget(1, 1, total_tokens=1000), Usage(input_tokens=600, output_tokens=300))
    >>> token_refusal(task, 50, 100).detail
    'reserving 150 tokens would exceed the total token budget (1000; used 900)'
    >>> token_refusal(task, 50, 50) is None
    True
    """
    refusal = stop_refusal(task)
    if refusal is not None:
        return refusal
    budget, used = task.budget, task.used
    for kind, amount, spent, limit in (
        ("input", input_tokens, used.input_tokens, budget.input_tokens),
        ("output", output_tokens, used.output_tokens, budget.output_tokens),
    ):
        if limit is not None and spent + amount > limit:
            detail = f"reserving {amount} {kind} tokens would exceed the {kind} token budget ({limit}; used {spent})"
            return _refused(task, Reason.TOKEN_BUDGET, detail)
    total, spent = input_tokens + output_tokens, used.input_tokens + used.output_tokens
    if budget.total_tokens is not None and spent + total > budget.total_tokens:
        detail = f"reserving {total} tokens would exceed the total token budget ({budget.total_tokens}; used {spent})"
        return _refused(task, Reason.TOKEN_BUDGET, detail)
    return None


# --- operator steps refused by the state of what they name ---------------------------------------------------------


def unknown_step(task_id: str, key: str) -> NotFoundError:
    """The error of ending a durable step that never began."""
    return NotFoundError(f"no step {key!r} began in task {task_id!r}: begin_step first")


def unknown_task(task_id: str) -> NotFoundError:
    """The error of a step on a task the store does not hold."""
    return NotFoundError(f"unknown task {task_id!r}: call ensure_task first")


def check_reconcile(operation_id: str, record: OperationRecord | None) -> OperationRecord:
    """The operation, if it can be reconciled (only an ``unknown`` one can); else the error that says why.

    >>> from agents_loopguard.store.base import OperationRecord
    >>> check_reconcile("op-1", OperationRecord("op-1", "t", "pay", "fp", OperationState.COMMITTED))
    Traceback (most recent call last):
    agents_loopguard.values.errors.StateError: operation 'op-1' is committed, not unknown: nothing to reconcile
    """
    if record is None:
        raise NotFoundError(f"unknown operation {operation_id!r}")
    if record.state is not OperationState.UNKNOWN:
        raise StateError(f"operation {operation_id!r} is {record.state}, not unknown: nothing to reconcile")
    return record


def check_answer(operation_id: str, record: OperationRecord | None, expected: OperationState) -> OperationRecord:
    """The operation, if it is still in the state the operator's answer was decided on; else the error.

    >>> from agents_loopguard.store.base import OperationRecord
    >>> committed = OperationRecord("op-1", "t", "pay", "fp", OperationState.COMMITTED)
    >>> check_answer("op-1", committed, OperationState.UNKNOWN)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    agents_loopguard.values.errors.StateError: operation 'op-1' is committed now, not unknown: it changed meanwhile; ...
    """
    if record is None:
        raise NotFoundError(f"unknown operation {operation_id!r}")
    if record.state is not OperationState(expected):
        raise StateError(
            f"operation {operation_id!r} is {record.state} now, not {expected}: it changed meanwhile; look again"
        )
    return record


def reopens(status: str, unknown_left: bool) -> bool:
    """Whether an answer about an operation reopens its task: the task waits for reconciliation and nothing of it
    is unknown any more (a task in any other state keeps it; ``recover`` is the decision for those).

    >>> reopens("needs_reconciliation", False), reopens("needs_reconciliation", True), reopens("completed", False)
    (True, False, False)
    """
    return status == "needs_reconciliation" and not unknown_left


def check_decide(pause_id: str, record: PauseRecord | None) -> PauseRecord:
    """The pause, if an operator's decisions can be recorded on it (only a pending one takes them); else the error."""
    if record is None:
        raise NotFoundError(f"unknown pause {pause_id!r}")
    if record.status != "pending":
        raise PauseAlreadyResumed(f"pause {pause_id!r} is {_who_did(record)}: its decisions are final")
    return record


def _who_did(record: PauseRecord) -> str:
    """``decided by 'ana'``, ``resumed by 'worker-2' (decided by 'ana')``: each name credited with its own act."""
    decided = f"decided by {record.decided_by!r}" if record.decided_by else ""
    if record.status != "resumed":
        return decided or record.status
    resumed = f"resumed by {record.resumed_by!r}" if record.resumed_by else "resumed"
    return f"{resumed} ({decided})" if decided else resumed


def check_claim(pause_id: str, record: PauseRecord | None, *, decisions: bool) -> PauseRecord:
    """The pause, if it can be resumed (once; with decisions, brought by the claimer or recorded); else the error.

    ``decisions``: the claimer brings its own.
    """
    if record is None:
        raise NotFoundError(f"unknown pause {pause_id!r}")
    if record.status == "resumed":
        raise PauseAlreadyResumed(
            f"pause {pause_id!r} was already resumed by {record.resumed_by!r}: a pause resumes at most once"
        )
    if not decisions and record.status != "decided":
        raise StateError(f"pause {pause_id!r} has no recorded decisions: pass them, or decide it first")
    return record


def check_recover(task_id: str, task: TaskView, kind: str) -> None:
    """Refuse to reopen a running task by a ``kind`` transition: it has nothing to recover, unless it carries a stop
    mark and the transition is a ``recover`` (which clears it).

    >>> check_recover("t-1", TaskState(Budget(1, 1)), "recover")
    Traceback (most recent call last):
    agents_loopguard.values.errors.StateError: task 't-1' is running: there is nothing to recover
    """
    if task.status == "running" and (task.stop_reason is None or kind != "recover"):
        raise StateError(f"task {task_id!r} is running: there is nothing to recover")
