"""What a write's ``probe(operation_id, args)`` answers: the receiving system, asked read-only by the operation's
stable id, says it holds the write (``committed`` with its result), that it never got it (``not_committed``), or
nothing conclusive (``unknown``). Anything else a probe returns is no answer: the operation stays unknown.

>>> parse_probe_answer(committed({"refund": "r-9"})).state
'committed'
>>> parse_probe_answer("not_committed").state, parse_probe_answer({"state": "unknown"}).state
('not_committed', 'unknown')
>>> parse_probe_answer(42)
'the probe returned 42 (int): answer committed(result), NOT_COMMITTED or UNKNOWN'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NOT_COMMITTED",
    "PROBE_STATES",
    "UNKNOWN",
    "Probe",
    "ProbeAnswer",
    "committed",
    "not_committed",
    "parse_probe_answer",
    "unknown",
]

Probe = Callable[[str, dict[str, Any]], Any]
"""``probe(operation_id, args) -> ProbeAnswer`` (sync or async): a read-only question to the receiving system about
the write named ``operation_id``, made with the write's arguments."""

PROBE_STATES = ("committed", "not_committed", "unknown")
"""The answers a probe can give, as the ledger names them."""

_MAX_EVIDENCE = 500


@dataclass(frozen=True)
class ProbeAnswer:
    """The receiver's answer about one write, as a probe gives it."""

    state: str
    """``committed``, ``not_committed`` or ``unknown``."""
    result: Any = None
    """For ``committed``: the write's result as the receiver holds it (stored in the ledger and returned, as the
    body's output would have been, to the application's ``verify`` and to the model)."""
    evidence: str = ""
    """What the receiver showed (a record id, a status line): recorded with the answer, like an operator's why."""


def committed(result: Any = None, *, evidence: str = "") -> ProbeAnswer:
    """The receiver holds the write: ``result`` is what the write's body would have returned.

    >>> committed({"refund": "r-9"}, evidence="refund r-9 found").evidence
    'refund r-9 found'
    """
    return ProbeAnswer("committed", result, evidence)


def not_committed(*, evidence: str = "") -> ProbeAnswer:
    """The receiver proves it never got the write (one new attempt is allowed within the budget).

    >>> not_committed(evidence="no refund for A-17").state
    'not_committed'
    """
    return ProbeAnswer("not_committed", None, evidence)


def unknown(*, evidence: str = "") -> ProbeAnswer:
    """The receiver cannot say (the operation stays unknown, for a human).

    >>> unknown().state
    'unknown'
    """
    return ProbeAnswer("unknown", None, evidence)


NOT_COMMITTED = not_committed()
"""``not_committed()`` without evidence."""
UNKNOWN = unknown()
"""``unknown()`` without evidence."""


def parse_probe_answer(value: Any) -> ProbeAnswer | str:
    """A probe's return value as a :class:`ProbeAnswer`, or why it is none: a :class:`ProbeAnswer`, one of the
    strings ``committed`` (no result), ``not_committed``, ``unknown``, or a mapping with ``state`` (``result`` and
    ``evidence`` optional).

    >>> parse_probe_answer({"state": "committed", "result": 5, "evidence": "row 5"})
    ProbeAnswer(state='committed', result=5, evidence='row 5')
    >>> parse_probe_answer({"state": "maybe"})
    "the probe's state 'maybe' is none of committed, not_committed, unknown"
    """
    if isinstance(value, ProbeAnswer):
        state, result, evidence = value.state, value.result, value.evidence
    elif isinstance(value, str):
        state, result, evidence = value, None, ""
    elif isinstance(value, Mapping) and isinstance(value.get("state"), str):
        state, result, evidence = value["state"], value.get("result"), value.get("evidence", "")
    else:
        shown, kind = repr(value)[:80], type(value).__name__
        return f"the probe returned {shown} ({kind}): answer committed(result), NOT_COMMITTED or UNKNOWN"
    if state not in PROBE_STATES:
        return f"the probe's state {state!r} is none of {', '.join(PROBE_STATES)}"
    if not isinstance(evidence, str):
        return f"the probe's evidence must be a string, got {type(evidence).__name__}"
    if state != "committed" and result is not None:
        return f"the probe answered {state} with a result: only a committed write has one"
    return ProbeAnswer(state, result, evidence[:_MAX_EVIDENCE])
