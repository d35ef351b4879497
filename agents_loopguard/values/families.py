"""A task's family: the bounded label its metrics are summed under, never its id and never free text (R22).

A family is named explicitly (``RunOptions(family="refunds")``; a flow's activations take the flow's name), or
derived from the task id by one rule, :func:`task_family`:

* an id that is only an identifier (a uuid, a number, a hash or another random token) is in the family ``id``;
* an id made of one lowercase word and then only identifiers (``ticket-981``, ``order-42-7``, ``adk-5f0c...``)
  is in the family of that word (``ticket``, ``order``, ``adk``);
* anything else (free text, an e-mail address, a name, mixed case) is in the family ``other``.

So 10,000 uuid task ids are one family, ``ticket-1`` to ``ticket-9999`` another, and ``alice@example.com`` is
``other``: the text of an id is never a label unless it is a plain word followed by an identifier. The metrics keep
at most :data:`MAX_FAMILIES` families by number of tasks and sum the rest under ``other``.

>>> [task_family(t) for t in ("ticket-981", "3f2a9c1b-0e4d-4c1e-9b7a-1c2d3e4f5a6b", "alice@example.com", "42")]
['ticket', 'id', 'other', 'id']
"""

from __future__ import annotations

import re

from .errors import InputError

__all__ = ["FAMILY_ID", "FAMILY_OTHER", "MAX_FAMILIES", "check_family", "named_family", "task_family"]

FAMILY_ID = "id"
"""The family of a task whose id is only an identifier (uuid, number, hash, random token)."""
FAMILY_OTHER = "other"
"""The family of a task whose id is free text, and of the families past :data:`MAX_FAMILIES` in the metrics."""
MAX_FAMILIES = 20
"""The most families the metrics export; the smaller ones are summed under :data:`FAMILY_OTHER`."""

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_WORD = re.compile(r"[a-z]{2,24}")
_SEPARATORS = re.compile(r"[-_:/.]")
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
_HEX = re.compile(r"(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{4,}")
_TOKEN = re.compile(r"(?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]{12,}")


def _identifier(text: str) -> bool:
    """A uuid, or tokens (split at ``-_:/.``) each a number, a hex string with a digit, or a long random token."""
    if _UUID.fullmatch(text):
        return True
    tokens = _SEPARATORS.split(text)
    return all(t.isdigit() or _HEX.fullmatch(t) or _TOKEN.fullmatch(t) for t in tokens)


def task_family(task_id: str) -> str:
    """The family of a task that names none, derived from its id (see the module for the rule).

    >>> [task_family(t) for t in ("order-42-7", "adk-5f0c2e9a1b3d", "task-3f2a9c1b0e4d", "refund-question")]
    ['order', 'adk', 'task', 'other']
    >>> [task_family(t) for t in ("Ticket-4", "ana.lopez@x.com", "ana-lopez-mail", "", "ticket-")]
    ['other', 'other', 'other', 'other', 'other']
    """
    if not isinstance(task_id, str) or not task_id.isascii():
        return FAMILY_OTHER
    if _identifier(task_id):
        return FAMILY_ID
    head, sep, rest = _split_first(task_id)
    return head if sep and _WORD.fullmatch(head) and _identifier(rest) else FAMILY_OTHER


def _split_first(text: str) -> tuple[str, str, str]:
    found = _SEPARATORS.search(text)
    if found is None:
        return text, "", ""
    return text[: found.start()], found.group(), text[found.end() :]


def check_family(family: str | None) -> str | None:
    """A family named explicitly, checked: a lowercase name of at most 40 letters, digits, ``-`` and ``_``
    starting with a letter (a label value an operator chose); ``None`` stays ``None`` (derive it from the id).

    >>> check_family("refunds"), check_family(None)
    ('refunds', None)
    >>> check_family("Alice Smith")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agents_loopguard.values.errors.InputError: family 'Alice Smith' is not a family name: use a lowercase name of ...
    """
    if family is None:
        return None
    if not isinstance(family, str) or not _NAME.fullmatch(family):
        raise InputError(
            f"family {family!r} is not a family name: use a lowercase name of at most 40 letters, digits, '-' and '_' "
            "that starts with a letter (it is a metrics label)"
        )
    return family


def named_family(family: str | None, flow: str | None = None) -> str | None:
    """The family a new task is created in: ``family`` when named (checked), else its workflow's name when that is a
    family name, else None (the store derives it from the task id).

    >>> named_family("refunds"), named_family(None, "orders-sync"), named_family(None, "Orders Sync")
    ('refunds', 'orders-sync', None)
    """
    if family is not None or flow is None:
        return check_family(family)
    try:
        return check_family(flow)
    except InputError:
        return None
