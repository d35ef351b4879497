"""A conversation: one thread of runs under one budget (a LangChain thread, an ADK session).

A task's outcome is sticky (R11): once a run ended it, the task runs nothing again. A conversation goes on after
each answer, so each new message after a run ended is a run of its own, under a task of its own: the thread's
first task is named as the thread, the next ones ``<thread>#2``, ``<thread>#3``... Their budget is what the thread's
budget leaves (the first task's stored budget, extensions included, minus what every earlier task used), so the
thread as a whole never spends more than its budget. A thread *holds* (a new message runs nothing and reads the last
outcome) while its last task waits for a human (a pause), has a write whose result is unknown, was stopped by an
operator (the stop mark, set before or after it ended), or ran out of model turns or time (a run started once
nothing is left ends at its first request, ``stopped/model_budget``, and says so).

>>> from agents_loopguard import Budget, MemoryStore
>>> from agents_loopguard.engine.core import Guard
>>> from agents_loopguard.values.calls import Verdict
>>> from agents_loopguard.values.outcome import Reason, Status
>>> store = MemoryStore()
>>> first = next_run(store, "chat-1", Budget(model_turns=5, tool_executions=3))
>>> first.task_id, first.budget.model_turns, first.holds
('chat-1', 5, False)
>>> guard = Guard(budget=Budget(5, 3), store=store, task_id="chat-1")
>>> guard.begin_turn()
>>> _ = guard.end(Verdict(Status.PARTIAL, Reason.UNVERIFIED_FINAL, "answered"))
>>> following = next_run(store, "chat-1", Budget(model_turns=5, tool_executions=3))
>>> following.task_id, following.budget.model_turns, following.holds
('chat-1#2', 4, False)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar

from ..store.base import Store, TaskSnapshot
from ..store.defaults import default_store
from ..values.budget import TOKEN_LIMITS, Budget
from ..values.outcome import Reason, Status, Usage
from .options import RunOptions

Options = TypeVar("Options", bound=RunOptions)

__all__ = ["NextRun", "next_run", "next_run_options", "remaining"]

_HOLDING_STATUSES = frozenset({str(Status.NEEDS_HUMAN), str(Status.NEEDS_RECONCILIATION)})
_HOLDING_REASONS = frozenset({str(Reason.STOP_REQUESTED), str(Reason.DEADLINE), str(Reason.MODEL_BUDGET)})


@dataclass(frozen=True)
class NextRun:
    """The task the conversation's next run belongs to."""

    task_id: str
    budget: Budget
    """What the thread's budget leaves for it (a running task: its own stored budget)."""
    holds: bool
    """The thread holds: ``task_id`` is its last task, ended; the run runs nothing and reads that outcome."""


def _add(used: Usage, more: Usage) -> Usage:
    return Usage(
        models=used.models + more.models,
        tools=used.tools + more.tools,
        cost=used.cost + more.cost,
        input_tokens=used.input_tokens + more.input_tokens,
        output_tokens=used.output_tokens + more.output_tokens,
    )


def remaining(budget: Budget, used: Usage) -> Budget:
    """What ``budget`` leaves once ``used`` is spent (never below zero; the deadline stays).

    >>> remaining(Budget(model_turns=6, tool_executions=4, total_tokens=100), Usage(models=2, tools=5,
    ...           input_tokens=30, output_tokens=20)).total_tokens
    50
    """
    spent = {
        "input_tokens": used.input_tokens,
        "output_tokens": used.output_tokens,
        "total_tokens": used.input_tokens + used.output_tokens,
    }
    tokens = {
        name: None if getattr(budget, name) is None else max(0, getattr(budget, name) - spent[name])
        for name in TOKEN_LIMITS
    }
    return dataclasses.replace(
        budget,
        model_turns=max(0, budget.model_turns - used.models),
        tool_executions=max(0, budget.tool_executions - used.tools),
        cost=None if budget.cost is None else max(0.0, budget.cost - used.cost),
        **tokens,
    )


def _holds(snapshot: TaskSnapshot) -> bool:
    """An ended task after which the thread runs nothing new (see the module)."""
    outcome = snapshot.outcome or {}
    if snapshot.stop_reason is not None:
        return True
    return outcome.get("status") in _HOLDING_STATUSES or outcome.get("reason") in _HOLDING_REASONS


def next_run(store: Store, thread: str, budget: Budget) -> NextRun:
    """The task of the next run of conversation ``thread`` whose budget is ``budget`` (the first task's stored
    budget wins once it exists): its running task, or a new one with what the thread's budget leaves, or (the
    thread holds) its last ended task."""
    task_id, number, used = thread, 1, Usage()
    whole = budget
    while True:
        snapshot = store.task(task_id)
        if snapshot is None:
            return NextRun(task_id, remaining(whole, used), holds=False)
        if number == 1:
            whole = snapshot.budget
        if snapshot.outcome is None:
            return NextRun(task_id, snapshot.budget, holds=False)
        used = _add(used, snapshot.used)
        if _holds(snapshot):
            return NextRun(task_id, snapshot.budget, holds=True)
        number += 1
        task_id = f"{thread}#{number}"


def next_run_options(options: Options, thread: str) -> tuple[Options, bool]:
    """``options`` pointed at the task of conversation ``thread``'s next run (see :func:`next_run`; the default
    store when none is given), and whether the thread holds."""
    if options.budget is None:
        raise ValueError(
            "a conversation needs budget=Budget(model_turns=..., tool_executions=...): the thread's budget"
        )
    store = options.store if options.store is not None else default_store()
    found = next_run(store, thread, options.budget)
    return dataclasses.replace(options, task_id=found.task_id, budget=found.budget, store=store), found.holds
