"""What the application's trusted ``verify(call, result)`` returns, and the rules that validate it.

Progress is what the application verifies, never what the model claims: an integer revision that never goes back,
``done``, and the effect of a write. A poll may say ``pending``; a page may name its next cursor and its records.
Anything else a verifier returns (``None``, a string, a negative revision, ``done`` on a failed result...) is
*invalid evidence*, which ends the run instead of raising.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "UNVERIFIED",
    "Effect",
    "Evidence",
    "ResultStatus",
    "Unverified",
    "VerifyFailed",
    "describe",
    "parse_evidence",
    "result_status",
    "unproven",
]

_MAX_SAFE_INT = 2**53 - 1


class Effect(str, Enum):
    """The effect a call had on the outside world, as the application verified it."""

    NONE = "none"
    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class ResultStatus(str, Enum):
    """The class of an executor's result."""

    OK = "ok"
    RETRYABLE = "retryable"
    FATAL = "fatal"
    NEEDS_HUMAN = "needs_human"

    def __str__(self) -> str:
        return self.value


_EFFECTS: dict[str, Effect] = {effect.value: effect for effect in Effect}


@dataclass(frozen=True)
class Evidence:
    """Verified facts about one result.

    >>> Evidence(revision=1, done=True, effect=Effect.COMMITTED)
    Evidence(revision=1, done=True, effect=<Effect.COMMITTED: 'committed'>, pending=False, cursor=None, records=())
    """

    revision: int
    """The application's revision after this result; it never goes back."""
    done: bool
    """True when the application validated that the whole task is done (only with an ok result)."""
    effect: Effect = Effect.NONE
    """For writes: committed, not_committed or unknown. Reads say none."""
    pending: bool = False
    """For polls: the job is still running. Pending is not progress and not a stall; the wait policy bounds it."""
    cursor: str | None = None
    """For pages: the next cursor. A cursor seen before is a cycle."""
    records: tuple[str, ...] = ()
    """For pages: ids of the records on this page. A page whose records were all seen before is a cycle."""
    verified: bool = field(default=True, repr=False)
    """False for the stand-in evidence of a read nobody verified (see :data:`UNVERIFIED`)."""


@dataclass(frozen=True)
class VerifyFailed:
    """What stands for the evidence when the application's ``verify`` raised: invalid evidence, never a crash.

    >>> parse_evidence(VerifyFailed(KeyError("order")), status=ResultStatus.OK, current_revision=0)
    'verify raised KeyError'
    """

    error: BaseException


class Unverified:
    """What stands for the evidence of a read that nobody verifies (a tool declared without ``verify``, or one the
    run found undeclared): it proves no progress, and it is no stall either, since nothing was checked. A run of
    such reads is bounded by ``Policy.max_unverified`` (and the same-call rule and the budgets)."""

    def __repr__(self) -> str:
        return "UNVERIFIED"


UNVERIFIED = Unverified()


def _getter(raw: Any) -> Any:
    """A ``name -> value`` reader for a mapping or an object with attributes."""
    if type(raw) is dict or isinstance(raw, Mapping):
        return raw.get
    return lambda name: getattr(raw, name, None)


def _truthy(raw: Any) -> bool:
    """JavaScript truthiness, which the prototype's ``!checked`` / ``!result`` use."""
    if raw is None or raw is False:
        return False
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return raw != 0 and not (isinstance(raw, float) and math.isnan(raw))
    if isinstance(raw, str):
        return raw != ""
    return True


_STATUSES: dict[str, ResultStatus] = {status.value: status for status in ResultStatus}


def result_status(result: Any) -> ResultStatus | None:
    """The status of an executor result (mapping or object with ``status``), or ``None`` if it has no valid one.

    >>> result_status({"status": "ok"}), result_status("garbage")
    (<ResultStatus.OK: 'ok'>, None)
    """
    if not _truthy(result):
        return None
    status = _getter(result)("status")
    if isinstance(status, ResultStatus):
        return status
    if type(status) is str:
        return _STATUSES.get(status)
    return None


def _revision(value: Any) -> int | None:
    if type(value) is int and -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and abs(value) <= _MAX_SAFE_INT:
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) <= _MAX_SAFE_INT:
        return int(value)
    return None


def describe(value: Any) -> str:
    """A value as an error detail may name it: its type and size, never its content (details are stored and
    logged; a verifier's garbage may hold customer data or a credential).

    >>> describe("hunter2"), describe({"a": 1}), describe(None), describe(-3)
    ('a str of 7 characters', 'a dict of 1 item', 'None', 'an int')
    """
    if value is None or isinstance(value, bool):
        return repr(value)
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    if isinstance(value, (str, bytes)):
        return f"{article} {name} of {len(value)} character{'s' if len(value) != 1 else ''}"
    try:
        size = len(value)
    except TypeError:
        return f"{article} {name}"
    return f"{article} {name} of {size} item{'s' if size != 1 else ''}"


def parse_evidence(raw: Any, *, status: ResultStatus, current_revision: int, key: str | None = None) -> Evidence | str:
    """Validate what ``verify`` returned; return :class:`Evidence` or a short explanation of why it is invalid.

    ``current_revision`` is the last revision of the verify's progress key (``key``, named in the explanation). The
    explanation names a bad value by its type and size (:func:`describe`), never by its content.

    >>> parse_evidence({"revision": 2, "done": False, "effect": "none"}, status=ResultStatus.OK, current_revision=1)
    Evidence(revision=2, done=False, effect=<Effect.NONE: 'none'>, pending=False, cursor=None, records=())
    >>> parse_evidence({"revision": 0, "done": False, "effect": "none"}, status=ResultStatus.OK, current_revision=1)
    'revision 0 goes back from 1'
    >>> parse_evidence({"revision": "card 4111", "done": False}, status=ResultStatus.OK, current_revision=0)
    'revision (a str of 9 characters) is not a safe integer'
    >>> parse_evidence({"revision": 1, "done": True}, status=ResultStatus.OK, current_revision=2, key="refund")
    "revision 1 goes back from 2, the last revision of progress key 'refund'"
    """
    if isinstance(raw, VerifyFailed):
        return f"verify raised {type(raw.error).__name__}"
    if isinstance(raw, Evidence):
        raw_revision, done, effect_raw = raw.revision, raw.done, raw.effect
        extras: tuple[Any, Any, Any] = (raw.pending, raw.cursor, raw.records)
    else:
        if type(raw) is not dict and not _truthy(raw):
            return f"verify returned {describe(raw)}"
        field = _getter(raw)
        raw_revision, done, effect_raw = field("revision"), field("done"), field("effect")
        extras = (field("pending") or False, field("cursor"), field("records") or ())
    revision = _revision(raw_revision)
    if revision is None:
        return f"revision ({describe(raw_revision)}) is not a safe integer"
    if revision < current_revision:
        whose = f", the last revision of progress key {key!r}" if key is not None else ""
        return f"revision {revision} goes back from {current_revision}{whose}"
    if not isinstance(done, bool):
        return f"done ({describe(done)}) is not a boolean"
    effect = _EFFECTS.get(effect_raw) if isinstance(effect_raw, str) else None
    if effect is None:
        return f"effect ({describe(effect_raw)}) is not one of none, committed, not_committed, unknown"
    if done and status is not ResultStatus.OK:
        return f"done with a {status} result"
    return _with_extras(revision, done, effect, *extras)


def _with_extras(
    revision: int, done: bool, effect: Effect, pending: Any, cursor: Any, records_raw: Any
) -> Evidence | str:
    """The poll and page parts of evidence: ``pending``, ``cursor``, ``records``."""
    if not isinstance(pending, bool):
        return f"pending ({describe(pending)}) is not a boolean"
    if pending and done:
        return "pending and done at once"
    if cursor is not None and not isinstance(cursor, str):
        return f"cursor ({describe(cursor)}) is not a string"
    if isinstance(records_raw, (str, bytes)) or not isinstance(records_raw, (list, tuple)):
        return f"records ({describe(records_raw)}) is not a list of ids"
    records = []
    for record in records_raw:
        if isinstance(record, bool) or not isinstance(record, (str, int)):
            return f"record id ({describe(record)}) is not a string or integer"
        records.append(str(record))
    return Evidence(revision=revision, done=done, effect=effect, pending=pending, cursor=cursor, records=tuple(records))


def unproven(proof: Evidence, replayed: str | None = None) -> str:
    """Why a write's effect is not proven; for a replay of operation ``replayed``, what disagrees (the ledger's
    committed, the receiver's).

    >>> unproven(Evidence(revision=1, done=False, effect=Effect.NONE))
    "the write's effect is none: not proven committed or not committed"
    """
    if replayed is not None:
        return (
            f"the ledger holds operation {replayed!r} as committed but its verify now says {proof.effect}: the ledger "
            "and the receiver disagree; ask the receiver, then confirm the ledger or correct it (loopguard "
            "reconcile --correct)"
        )
    return f"the write's effect is {proof.effect}: not proven committed or not committed"
