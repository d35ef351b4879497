"""A conversation under one task, framework-free: a chat session (an ADK session, a LangChain thread) is one task
whose budget bounds the whole conversation, and each user message is a run of its own on it.

A run that ended with an answer (``partial/unverified_final``, or ``completed/validated_done`` when the application
validated it) leaves the task waiting for the user, not finished for ever: the next user message reopens it by a
recorded transition (kind ``message``: who, why, the outcome it followed), its counters continuing, never reset. A
run the guard ended (a budget, a loop rule, the stop mark, an unknown write, a pause waiting for a human) stays
ended: the next message is answered with its outcome, and the way on is the operator's (``loopguard recover``, a
reconciliation, the pause's decision). The stored outcome of a task is read here too, from any process.

>>> from agents_loopguard import Budget, MemoryStore, RunOptions, Status
>>> from agents_loopguard.run import Ending, GuardedRun, conclude_now
>>> options = RunOptions(budget=Budget(model_turns=4, tool_executions=2), store=MemoryStore(), task_id="chat-1")
>>> first = conclude_now(GuardedRun.start(options), Ending(output="Hello!"))
>>> (first.status, stored_outcome(options).final_output)
(<Status.PARTIAL: 'partial'>, 'Hello!')
>>> continue_conversation(options, who="ana", why="a new message in session chat-1").kind
'message'
>>> stored_outcome(options) is None    # running again: the next run continues its counters
True
"""

from __future__ import annotations

import time

from ..run.options import RunOptions
from ..store.base import Store, TransitionRecord, operator_text
from ..store.defaults import default_store
from ..values.errors import StateError
from ..values.outcome import Outcome, Reason, RecordError, RecoveryRecord, Status

__all__ = ["ANSWERED", "continue_conversation", "stored_outcome", "task_of"]

ANSWERED = frozenset({(Status.PARTIAL, Reason.UNVERIFIED_FINAL), (Status.COMPLETED, Reason.VALIDATED_DONE)})
"""The outcomes of a run that ended with an answer to the user: the next user message continues the task."""


def task_of(options: RunOptions, task_id: str | None = None) -> tuple[Store, str | None]:
    """The store and the task id the options name (``task_id`` when they name none): the guard's, else ``store=``
    (default: the persistent store ``loopguard`` reads) and ``task_id=``."""
    guard = options.guard
    if guard is not None:
        return guard.store, guard.task_id
    store = options.store if options.store is not None else default_store()
    return store, options.task_id or task_id


def stored_outcome(options: RunOptions, task_id: str | None = None) -> Outcome | None:
    """The terminal outcome stored for the task of ``options`` (or ``task_id``), ``None`` while it runs or before it
    exists: what a process that did not run it reads."""
    store, task = task_of(options, task_id)
    if task is None:
        return None
    snapshot = store.task(task)
    if snapshot is None or snapshot.outcome is None:
        return None
    try:
        return RecoveryRecord.from_json(snapshot.outcome).to_outcome()
    except RecordError as exc:
        raise RecordError(f"task {task!r}: {exc}") from exc


def continue_conversation(
    options: RunOptions, task_id: str | None = None, *, who: str, why: str
) -> TransitionRecord | None:
    """Reopen the task of ``options`` for a new user message when its last run ended with an answer (see
    :data:`ANSWERED`): a ``message`` transition is recorded (``who``/``why`` redacted with the options' secrets),
    the counters go on. ``None`` when there is nothing to reopen: a new task, a task running (or just reopened by
    another process), one the guard ended (it stays ended), or a run given ``guard=`` (that guard object's outcome
    is sticky: every run with it is its one run)."""
    store, task = task_of(options, task_id)
    if task is None or options.guard is not None:
        return None
    outcome = stored_outcome(options, task)
    if outcome is None or (outcome.status, outcome.reason) not in ANSWERED:
        return None
    secrets = options.secrets or (options.guard.secrets if options.guard is not None else ())
    try:
        return store.recover(
            task, who=operator_text(who, secrets), why=operator_text(why, secrets), kind="message", now=_now(options)
        )
    except StateError:  # another process reopened it first: the message runs on the running task
        return None


def _now(options: RunOptions) -> float:
    return options.guard.now() if options.guard is not None else time.time()
