"""Approval pauses, framework-free: the digest that protects a stored pause, and the rules for decisions.

A pause is stored with the task's budget and counters (see ``Store.save_pause``). Decisions (approve / reject) may
name only that pause's own pending calls, and must name each of them; a stored pause whose digest no longer matches
its content is refused. The Agents SDK adapter (``agents_loopguard.sdk``) saves and resumes pauses on top of this.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .canonical import canonical_json
from .errors import InputError, NotFoundError, StateError
from .store.base import PauseAlreadyResumed, PauseRecord, Store, TransitionRecord, operator_text

__all__ = [
    "APPROVE",
    "REJECT",
    "DecisionError",
    "PauseNotFound",
    "PauseTampered",
    "ResumeError",
    "UnknownPause",
    "check_decisions",
    "check_pause",
    "claim_for_resume",
    "decide",
    "decisions_for",
    "load_for_resume",
    "pause_digest",
]

APPROVE = "approve"
REJECT = "reject"


class DecisionError(InputError):
    """Decisions that do not fit the pause (a call it does not hold, a missing call, an unknown verb)."""


class PauseNotFound(DecisionError, NotFoundError):
    """No pause with that id in this store."""


class ResumeError(InputError):
    """A pause that cannot be resumed as asked (the message says why and what to do); nothing was run."""


class UnknownPause(ResumeError, NotFoundError):
    """No pause with that id in the store given; nothing was run."""


class PauseTampered(StateError):
    """The stored pause does not match its digest: its state or pending calls were changed after it was saved."""


def pause_digest(task_id: str, state: str, pending_calls: Sequence[Mapping[str, Any]]) -> str:
    """sha256 over the canonical JSON of the task id, the serialized run state and the pending calls.

    >>> len(pause_digest("t1", "{}", [{"call_id": "c1", "tool": "pay"}]))
    64
    """
    body = canonical_json({"task_id": task_id, "state": state, "pending_calls": [dict(c) for c in pending_calls]})
    return hashlib.sha256(body).hexdigest()


def check_pause(record: PauseRecord) -> PauseRecord:
    """Return ``record`` if its digest matches its content; raise :class:`PauseTampered` otherwise."""
    expected = pause_digest(record.task_id, record.state, record.pending_calls)
    if expected != record.digest:
        raise PauseTampered(
            f"pause {record.pause_id!r} of task {record.task_id!r} does not match its digest: the stored state or its "
            "pending calls were altered after the pause was saved; refuse it and investigate (nothing was run)"
        )
    return record


def check_decisions(record: PauseRecord, decisions: Mapping[str, str]) -> dict[str, str]:
    """Validate decisions against the pause: each of its pending calls decided, nothing else, verbs approve/reject.

    >>> from agents_loopguard import Budget, Usage
    >>> pause = PauseRecord("p1", "t1", "pending", "{}", "", ({"call_id": "c1"},), Budget(1, 1), Usage())
    >>> check_decisions(pause, {"c1": "approve"})
    {'c1': 'approve'}
    >>> check_decisions(pause, {"c1": "approve", "c9": "approve"})
    Traceback (most recent call last):
    ...
    agents_loopguard.approvals.DecisionError: pause 'p1' holds no pending call 'c9' (its calls: c1); nothing was run
    """
    pending = [str(call.get("call_id")) for call in record.pending_calls]
    for call_id, verb in decisions.items():
        if call_id not in pending:
            raise DecisionError(
                f"pause {record.pause_id!r} holds no pending call {call_id!r} (its calls: {', '.join(pending)}); "
                "nothing was run"
            )
        if verb not in (APPROVE, REJECT):
            raise DecisionError(f"decision {verb!r} for call {call_id!r} is neither {APPROVE!r} nor {REJECT!r}")
    missing = [call_id for call_id in pending if call_id not in decisions]
    if missing:
        raise DecisionError(
            f"pause {record.pause_id!r} still has undecided calls: {', '.join(missing)}; decide every pending call"
        )
    return {call_id: decisions[call_id] for call_id in pending}


def decide(
    store: Store,
    pause_id: str,
    *,
    who: str,
    approve: Iterable[str] = (),
    reject: Iterable[str] = (),
    approve_all: bool = False,
    reject_all: bool = False,
    why: str = "",
    secrets: Iterable[str] = (),
    now: float | None = None,
) -> PauseRecord:
    """Record an operator's decisions on a pending pause, for the application's process that resumes it.

    ``who`` and ``why`` are redacted before they are stored (credential patterns, and the ``secrets`` given).

    >>> from agents_loopguard import Budget, Guard, MemoryStore
    >>> store = MemoryStore()
    >>> _ = Guard(budget=Budget(5, 5), store=store, task_id="t1")
    >>> calls = [{"call_id": "c1", "tool": "pay", "arguments": "{}", "operation_id": "inv-1"}]
    >>> _ = store.save_pause("t1", "p1", "{}", calls, digest=pause_digest("t1", "{}", calls),
    ...                      outcome={"status": "needs_human"})
    >>> decide(store, "p1", who="ana", approve_all=True).decisions
    {'c1': 'approve'}
    """
    if not who:
        raise DecisionError("a decision is recorded with who made it")
    record = store.pause(pause_id)
    if record is None:
        raise PauseNotFound(f"unknown pause {pause_id!r}")
    check_pause(record)
    if approve_all and reject_all:
        raise DecisionError("approve_all and reject_all together make no decision")
    decisions: dict[str, str] = {}
    if approve_all or reject_all:
        verb = APPROVE if approve_all else REJECT
        decisions = {str(call.get("call_id")): verb for call in record.pending_calls}
    for call_id in approve:
        decisions[call_id] = APPROVE
    for call_id in reject:
        if decisions.get(call_id) == APPROVE and call_id in set(approve):
            raise DecisionError(f"call {call_id!r} cannot be both approved and rejected")
        decisions[call_id] = REJECT
    checked = check_decisions(record, decisions)
    who, why = operator_text(who, secrets), operator_text(why, secrets)
    return store.decide_pause(pause_id, who=who, decisions=checked, why=why, now=time.time() if now is None else now)


# --- resuming a pause, framework-free: the checks before anything runs, and the one claim that wins -------------


def load_for_resume(store: Store, pause_id: str, *, task_id: str | None = None) -> PauseRecord:
    """The pause to resume, checked: it exists, belongs to ``task_id`` (when given), matches its digest, and was
    not resumed yet. Raises :class:`UnknownPause`, :class:`ResumeError`, :class:`PauseTampered`,
    :class:`~agents_loopguard.store.base.PauseAlreadyResumed`; nothing is claimed or run.

    >>> from agents_loopguard import MemoryStore
    >>> try:
    ...     load_for_resume(MemoryStore(), "pause-nope")
    ... except UnknownPause as error:
    ...     print(str(error).split(":")[0])
    unknown pause 'pause-nope' in this store
    """
    record = store.pause(pause_id)
    if record is None:
        raise UnknownPause(f"unknown pause {pause_id!r} in this store: check the id (`loopguard show TASK` lists them)")
    if task_id is not None and record.task_id != task_id:
        raise ResumeError(
            f"pause {pause_id!r} belongs to task {record.task_id!r}, not {task_id!r}: a decision only touches "
            "its own task's pause; nothing was run"
        )
    check_pause(record)
    if record.status == "resumed":
        raise PauseAlreadyResumed(
            f"pause {pause_id!r} was already resumed by {record.resumed_by!r}: a pause resumes at most once "
            f"(the task continues in that run; `loopguard show {record.task_id}` shows it)"
        )
    return record


def decisions_for(record: PauseRecord, decisions: Mapping[str, str] | None) -> dict[str, str]:
    """The decisions a resume applies: ``decisions`` as given (checked against the pause, and equal to any the
    operator recorded), or, with ``None``, the recorded ones (an undecided pause is refused)."""
    if decisions is None:
        if record.status != "decided":
            raise DecisionError(
                f"pause {record.pause_id!r} has no recorded decisions: an operator approves it with "
                f"`loopguard approve {record.pause_id} --who NAME` (or approvals.decide), or pass decisions=; "
                "nothing was run"
            )
        return check_decisions(record, record.decisions)
    checked = check_decisions(record, decisions)
    if record.status == "decided" and record.decisions != checked:
        raise DecisionError(
            f"pause {record.pause_id!r} was already decided by {record.decided_by!r} ({record.decisions}); "
            f"decisions={checked} contradict them: resume with decisions=None to apply the recorded ones"
        )
    return checked


def claim_for_resume(
    store: Store,
    record: PauseRecord,
    decisions: dict[str, str],
    *,
    who: str,
    why: str,
    given: bool,
    secrets: Iterable[str] = (),
) -> tuple[PauseRecord, TransitionRecord]:
    """Record the decisions (if the caller brought them) and claim the pause: the database serializes both, so the
    decisions applied are always the ones stored, and one claimer wins. A pause that changed between the checks
    of :func:`load_for_resume` and the claim is refused (:class:`PauseTampered`; it stays claimed, nothing runs).
    ``who`` and ``why`` are redacted before they are stored (credential patterns, and the ``secrets`` given)."""
    at = time.time()
    who, why = operator_text(who, secrets), operator_text(why, secrets)
    if given and record.status == "pending":
        try:
            store.decide_pause(record.pause_id, who=who, decisions=decisions, why=why, now=at)
        except PauseAlreadyResumed:  # someone decided or resumed it since we read it
            current = store.pause(record.pause_id)
            if current is None or current.status == "resumed":
                raise
            decisions_for(current, decisions)  # decided meanwhile: only the very same decisions may go on
    claimed, transition = store.claim_pause(record.pause_id, who=who, decisions=None, why=why, now=at)
    checked = (record.task_id, record.state, record.pending_calls, record.digest)
    if (claimed.task_id, claimed.state, claimed.pending_calls, claimed.digest) != checked:
        raise PauseTampered(
            f"pause {record.pause_id!r} changed while it was being resumed: refused and nothing was run, but the "
            f"pause is claimed: investigate before reopening task {claimed.task_id!r}"
        )
    return claimed, transition
