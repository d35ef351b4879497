"""Approval pauses, framework-free: the digests that protect a stored pause and its decisions, and the rules for
decisions.

A pause is stored with the task's budget and counters (see ``Store.save_pause``). Decisions (approve / reject) may
name only that pause's own pending calls, and must name each of them. The Agents SDK adapter
(``agents_loopguard.sdk``) saves and resumes pauses on top of this.

Two digests protect what a resume relies on: the pause's (over the task, the serialized run state and the pending
calls) and, once an operator decided, the decisions' (over the pause, its digest, the decisions and who decided).
Both are checked by :func:`check_pause` (``decide``, ``load_for_resume``) and the decisions again after the claim
(``claim_for_resume``); a mismatch is :class:`PauseTampered` and nothing runs.

With a key (``LOOPGUARD_PAUSE_KEY``, or ``key=`` on these functions; every process that saves, decides or resumes
pauses needs the same one) the digests are HMAC-SHA256 (``hmac-sha256:...``): whoever can write the database but
does not hold the key cannot forge a pause or flip a decision (reject to approve) without the resume refusing it.
Without a key they are plain SHA-256: they detect a pause or decisions changed by hand, by a bug or by a partial
write, but *not* a database writer who recomputes them (the recipe is public); set a key where database writers are
not trusted. With a key, a pause sealed without one is refused (a writer could have made it), and so are decisions
recorded before schema version 4 (they carry no digest: resume those before setting the key). What neither detects:
a writer deleting a pause, or replaying an older pause and its decisions of the same task as a whole.
"""

from __future__ import annotations

import getpass
import hmac
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from ..run.options import RunOptions
from ..store.base import PauseAlreadyResumed, PauseRecord, Store, TransitionRecord, operator_text
from ..values.canonical import canonical_json
from ..values.digests import KEYED as _KEYED
from ..values.digests import PAUSE_KEY_ENV, pause_body, pause_digest
from ..values.digests import digest_key as _key
from ..values.digests import seal as _seal
from ..values.errors import InputError, NotFoundError, StateError
from .conversations import task_of
from .decisions import notifier_from_env
from .webhooks import failure_text

__all__ = [
    "APPROVE",
    "PAUSE_KEY_ENV",
    "REJECT",
    "DecisionError",
    "PauseKeyMissing",
    "PauseNotFound",
    "PauseTampered",
    "ResumeError",
    "UnknownPause",
    "check_decided",
    "check_decisions",
    "check_pause",
    "claim_for_resume",
    "continue_paused",
    "decide",
    "decisions_digest",
    "decisions_for",
    "find_pause_for",
    "load_for_resume",
    "pause_digest",
]

APPROVE = "approve"
REJECT = "reject"
_log = logging.getLogger("agents_loopguard.ops.approvals")


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


class PauseKeyMissing(StateError):
    """The pause (or its decisions) is sealed with a key this process was not given: it cannot be checked."""


def _matches(stored: str, body: bytes, key: bytes | None, what: str) -> bool:
    """Whether ``stored`` seals ``body``; a keyed digest without the key cannot be checked (an error)."""
    if stored.startswith(_KEYED) and key is None:
        raise PauseKeyMissing(
            f"{what} is sealed with a key: set ${PAUSE_KEY_ENV} (or pass key=) to check it; nothing was run"
        )
    return hmac.compare_digest(stored, _seal(body, key))


def _decisions_body(record: PauseRecord, decisions: Mapping[str, str], decided_by: str) -> bytes:
    return canonical_json(
        {
            "pause_id": record.pause_id,
            "task_id": record.task_id,
            "pause_digest": record.digest,
            "decisions": dict(decisions),
            "decided_by": decided_by,
        }
    )


def decisions_digest(
    record: PauseRecord, decisions: Mapping[str, str], decided_by: str, *, key: str | bytes | None = None
) -> str:
    """The digest of an operator's decisions on a pause: over the pause (id, task, its digest), the decisions and
    who decided; HMAC-SHA256 with a key, SHA-256 without (like :func:`pause_digest`)."""
    return _seal(_decisions_body(record, decisions, decided_by), _key(key))


def _tampered(record: PauseRecord, what: str) -> PauseTampered:
    return PauseTampered(
        f"pause {record.pause_id!r} of task {record.task_id!r} does not match its digest: {what} "
        "altered after they were saved; refuse it and investigate (nothing was run)"
    )


def check_pause(record: PauseRecord, *, key: str | bytes | None = None) -> PauseRecord:
    """Return ``record`` if its digest matches its content and, once decided, its decisions' digest matches them;
    raise :class:`PauseTampered` otherwise (:class:`PauseKeyMissing` when it is sealed with a key not given).

    ``key``: the digests' key, else ``$LOOPGUARD_PAUSE_KEY``; with a key, a digest made without it is refused.
    """
    body = pause_body(record.task_id, record.state, record.pending_calls)
    if not _matches(record.digest, body, _key(key), f"pause {record.pause_id!r}"):
        raise _tampered(record, "the stored state or its pending calls were")
    if record.status == "decided":
        check_decided(record, key=key)
    return record


def check_decided(record: PauseRecord, *, key: str | bytes | None = None) -> PauseRecord:
    """Return ``record`` if its recorded decisions match their digest (who decided included); else raise
    :class:`PauseTampered`. Decisions recorded before schema version 4 carry no digest: accepted without a key
    (a keyless digest would not stop a database writer either), refused with one."""
    secret = _key(key)
    if record.decisions_digest is None:
        if secret is None:
            return record
        raise _tampered(record, "its decisions carry no digest (recorded before schema version 4), or were")
    body = _decisions_body(record, record.decisions, record.decided_by or "")
    if not _matches(record.decisions_digest, body, secret, f"the decisions on pause {record.pause_id!r}"):
        raise _tampered(record, "its decisions (or who decided) were")
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
    agents_loopguard.ops.approvals.DecisionError: pause 'p1' holds no pending call 'c9' (its calls: c1); nothing was run
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
    key: str | bytes | None = None,
    now: float | None = None,
    notify: Callable[[Store, PauseRecord], object] | None = None,
) -> PauseRecord:
    """Record an operator's decisions on a pending pause, for the application's process that resumes it.

    The pause is checked against its digest first; the decisions are stored with their digest (over the pause, the
    decisions and who decided; keyed with ``key``, else ``$LOOPGUARD_PAUSE_KEY``). ``who`` and ``why`` are
    redacted before they are stored (credential patterns, and the ``secrets`` given).

    Once stored, the decision is told to ``notify(store, pause)`` (default: the
    :class:`~agents_loopguard.ops.decisions.DecisionNotifier` of ``$LOOPGUARD_DECISION_WEBHOOK``, if set): a signed
    webhook, posted in the background; its failure is logged and never undoes the decision.

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
    check_pause(record, key=key)
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
    digest = decisions_digest(record, checked, who, key=key)
    at = time.time() if now is None else now
    decided = store.decide_pause(pause_id, who=who, decisions=checked, why=why, digest=digest, now=at)
    _tell(store, decided, notify)
    return decided


def _tell(store: Store, record: PauseRecord, notify: Callable[[Store, PauseRecord], object] | None) -> None:
    """Hand the recorded decision to the notifier (the given one, else the environment's); never raises."""
    notifier = notify if notify is not None else notifier_from_env()
    if notifier is None:
        return
    try:
        notifier(store, record)
    except Exception as exc:  # the decision is recorded: its notice cannot undo it
        _log.warning("pause %s: the decision notice failed (%s)", record.pause_id, failure_text(exc))


# --- resuming a pause, framework-free: the checks before anything runs, and the one claim that wins -------------


def load_for_resume(
    store: Store, pause_id: str, *, task_id: str | None = None, key: str | bytes | None = None
) -> PauseRecord:
    """The pause to resume, checked: it exists, belongs to ``task_id`` (when given), matches its digest (and its
    recorded decisions theirs; ``key``, else ``$LOOPGUARD_PAUSE_KEY``), and was not resumed yet. Raises
    :class:`UnknownPause`, :class:`ResumeError`, :class:`PauseTampered`, :class:`PauseKeyMissing`,
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
    check_pause(record, key=key)
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
    key: str | bytes | None = None,
) -> tuple[PauseRecord, TransitionRecord]:
    """Record the decisions (if the caller brought them) and claim the pause: the database serializes both, so the
    decisions applied are always the ones stored, and one claimer wins. A pause that changed between the checks
    of :func:`load_for_resume` and the claim is refused (:class:`PauseTampered`; it stays claimed, nothing runs),
    and so are decisions that do not match their digest (``key``, else ``$LOOPGUARD_PAUSE_KEY``). ``who`` and
    ``why`` are redacted before they are stored (credential patterns, and the ``secrets`` given)."""
    at = time.time()
    who, why = operator_text(who, secrets), operator_text(why, secrets)
    if given and record.status == "pending":
        try:
            digest = decisions_digest(record, decisions, who, key=key)
            store.decide_pause(record.pause_id, who=who, decisions=decisions, why=why, digest=digest, now=at)
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
    check_decided(claimed, key=key)  # the decisions applied are the ones an operator (or this caller) sealed
    return claimed, transition


def find_pause_for(store: Store, call_ids: Iterable[str], *, task_id: str | None = None) -> PauseRecord:
    """The stored pause that waits for exactly ``call_ids`` (the calls a framework's own paused state holds), checked
    as by :func:`load_for_resume`. A state whose calls match no pause of ``task_id`` is refused, never run with a
    fresh budget: under another task's name, under a task that has no such pause, or under a new task id.

    >>> from agents_loopguard import MemoryStore
    >>> try:
    ...     find_pause_for(MemoryStore(), ["call_1"], task_id="t-new")
    ... except ResumeError as error:
    ...     print(str(error).split(";")[0])
    no stored pause waits for calls ['call_1']
    """
    wanted = sorted(str(call_id) for call_id in call_ids)

    def matching(pauses: Iterable[PauseRecord]) -> list[PauseRecord]:
        return [p for p in pauses if sorted(str(c.get("call_id")) for c in p.pending_calls) == wanted]

    found = matching(store.pauses(task_id) if task_id is not None else store.pauses())
    if not found and task_id is not None:
        elsewhere = matching(store.pauses())
        if elsewhere:
            other = elsewhere[-1]
            raise ResumeError(
                f"the pending calls {wanted} belong to pause {other.pause_id!r} of task {other.task_id!r}, not "
                f"{task_id!r}: a paused state continues its own task (resume_guarded(agent, {other.pause_id!r}, "
                "store=..., who=...)); nothing was run"
            )
    if not found:
        where = f"task {task_id!r}" if task_id is not None and store.task(task_id) is not None else "this store"
        raise ResumeError(
            f"no stored pause waits for calls {wanted}; a paused state continues the stored pause of the task that "
            f"paused, never a fresh budget ({where} has none): run the original task id, or "
            "resume_guarded(agent, pause_id, store=..., who=...); nothing was run"
        )
    return load_for_resume(store, found[-1].pause_id, task_id=found[-1].task_id)


def continue_paused(
    options: RunOptions,
    call_ids: Iterable[str],
    decisions: Callable[[PauseRecord], Mapping[str, str]],
    *,
    door: str,
    why: str,
) -> RunOptions:
    """R13 by a framework's own approval door (the Agents SDK's ``RunState`` after ``state.approve()``, ADK's tool
    confirmation...), the one claim-then-continue of every adapter: the stored pause of the options' task that waits
    for exactly ``call_ids`` is found and checked, ``decisions(pause)`` (call id -> approve/reject, read from the
    framework's own state) recorded, the pause claimed once (another claim is refused: nothing runs twice), and the
    options of the paused task returned (its id, budget and store: the counters continue). ``door`` names the
    framework's door in the default ``who`` (``RunOptions.who`` wins); ``why`` is recorded with the decisions. A
    state that no stored pause waits for is refused (:class:`ResumeError`): never a fresh budget.

    >>> from agents_loopguard import Budget, Guard, MemoryStore, RunOptions
    >>> store = MemoryStore()
    >>> guard = Guard(budget=Budget(model_turns=4, tool_executions=2), store=store, task_id="t-door")
    >>> paused = guard.pause("{}", [{"call_id": "c1", "tool": "refund", "kind": "write", "arguments": "{}"}])
    >>> options = RunOptions(budget=Budget(4, 2), store=store, task_id="t-door")
    >>> continued = continue_paused(options, ["c1"], lambda pause: {"c1": APPROVE}, door="doc", why="approved")
    >>> continued.task_id, store.pause(paused.pause_id).status
    ('t-door', 'resumed')
    >>> continue_paused(options, ["c1"], lambda pause: {"c1": APPROVE}, door="doc", why="again")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agents_loopguard.store.records.PauseAlreadyResumed: pause ... was already resumed by ...
    """
    store, task_id = task_of(options)
    record = find_pause_for(store, call_ids, task_id=task_id)
    claimed, _ = claim_for_resume(
        store,
        record,
        decisions_for(record, decisions(record)),
        who=options.who or f"{getpass.getuser()} ({door})",
        why=why,
        given=True,
    )
    return options.continuing(options.guard, task_id=claimed.task_id, budget=claimed.budget, store=store)
