"""The SDK's own approval door (R13): a ``RunState`` after ``state.approve()`` / ``state.reject()`` continues the
stored pause it came from, with the guarantees of :func:`~agents_loopguard.sdk.resume_guarded`.

The pause is found by its pending calls (:func:`~agents_loopguard.ops.approvals.find_pause_for`), checked and claimed
once (:func:`~agents_loopguard.ops.approvals.claim_for_resume`) with the decisions the application recorded in the
state; the run goes on under the task's guard, its counters continuing. Everything that is not SDK translation
is framework-free, in :mod:`agents_loopguard.ops.approvals`.
"""

from __future__ import annotations

import getpass
from typing import Any

from agents import RunState

from ..ops.approvals import APPROVE, REJECT, DecisionError, claim_for_resume, decisions_for, find_pause_for
from ..run.options import RunOptions
from ..store.base import PauseRecord
from ..store.defaults import default_store
from .private import nested_decision, tool_decisions

__all__ = ["ClaimedState", "continue_pause"]


class ClaimedState:
    """A ``RunState`` whose pause was already checked and claimed (by :func:`~agents_loopguard.sdk.resume_guarded`):
    run it as is."""

    def __init__(self, state: RunState[Any]) -> None:
        self.state = state


def _decisions_in(state: RunState[Any], record: PauseRecord) -> dict[str, str]:
    """The approve/reject decisions the application recorded in the SDK's own state (``state.approve(item)``)."""
    decided = tool_decisions(state)
    decisions: dict[str, str] = {}
    for item in state.get_interruptions():
        status = decided(item.name, str(item.call_id))
        if status is None:  # an interruption of an agent used as a tool: decided in its own state
            status = nested_decision(state, item)
        if status is None:
            raise DecisionError(
                f"call {item.call_id!r} ({item.name}) of pause {record.pause_id!r} has no decision in the run state: "
                "state.approve(item) or state.reject(item) for every interruption; nothing was run"
            )
        decisions[str(item.call_id)] = APPROVE if status else REJECT
    return decisions


def continue_pause(state: RunState[Any], options: RunOptions) -> RunOptions:
    """R13 by the SDK's own door: a ``RunState`` after ``state.approve()`` / ``state.reject()`` continues the
    stored pause it came from (digest checked, resumed once, the decisions recorded, the counters continuing).
    Returns the options of the pause's task. A state no stored pause waits for is refused: never a fresh budget."""
    guard = options.guard
    the_store = guard.store if guard is not None else options.store if options.store is not None else default_store()
    record = find_pause_for(
        the_store,
        [str(item.call_id) for item in state.get_interruptions()],
        task_id=guard.task_id if guard else options.task_id,
    )
    decisions = _decisions_in(state, record)
    claimed, _ = claim_for_resume(
        the_store,
        record,
        decisions_for(record, decisions),
        who=options.who or f"{getpass.getuser()} (RunState)",
        why="decided in the application's RunState",
        given=True,
    )
    return options.continuing(guard, task_id=claimed.task_id, budget=claimed.budget, store=the_store)
