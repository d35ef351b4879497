"""Progress keys: whose revision a ``verify`` reports, and how a key's revision moves the task's (a part of
:class:`~agents_loopguard.Guard`; these methods are the guard's).

A tool's ``verify`` sees only its own call and result, so it can only count what it sees: the documents a search
found so far, whether an order is confirmed. Each call therefore reports the revision of its **progress key**: the
tool's name by default, or the ``progress_key`` the tool declares (tools that count the same thing share one). A
key's revision is compared only with that key's last one: it never goes back (else ``invalid_evidence``), and it
advances when it is higher. Two tools never need each other's numbers, and no tool's count can make another's
evidence invalid.

The task's revision (the trace's, the repetition rule's, ``loopguard show``'s) moves whenever a key advances, by as
much as that key did: with one key it is that key's revision. The keys' last revisions are kept in the store with the
task (:meth:`~agents_loopguard.store.base.Store.progress_keys`), so a resume in another process compares with the
same numbers.

:attr:`Policy.task_revision <agents_loopguard.values.budget.Policy.task_revision>` (set by ``Policy.prototype()``)
is the article's form: one revision for the whole task, which every verify without a ``progress_key`` reports and
which is compared with the task's revision (so each verify must know what every other tool counted).

>>> from agents_loopguard import Budget, Guard
>>> guard = Guard(budget=Budget(9, 9))
>>> search = guard.authorize({"tool": "search", "kind": "read", "args": {"q": "refunds"}})
>>> guard.settle(search, {"status": "ok"}, evidence={"revision": 2, "done": False, "effect": "none"})
>>> confirm = guard.authorize({"tool": "confirm", "kind": "write", "operation_id": "confirm-42", "args": {"id": 42}})
>>> guard.settle(confirm, {"status": "ok"}, evidence={"revision": 1, "done": True, "effect": "committed"}).reason
<Reason.VALIDATED_DONE: 'validated_done'>
>>> guard.revision, guard.progress_revision(search.call), guard.progress_revision(confirm.call)
(3, 2, 1)
"""

from __future__ import annotations

from typing import NamedTuple

from ..store.base import Store
from ..values.budget import Policy
from ..values.calls import Call, Ticket
from ..values.evidence import Evidence

__all__ = ["TASK_KEY", "KeyStep", "ProgressKeys", "progress_key"]

TASK_KEY = "*"
"""The progress key of the task's own revision (the article's one number; no tool name can be ``*``)."""


def progress_key(call: Call, policy: Policy) -> str:
    """The progress key whose revision ``call``'s verify reports: its declared one, else the tool's name (the
    task's, :data:`TASK_KEY`, under ``Policy.task_revision``).

    >>> from agents_loopguard import Policy
    >>> progress_key(Call("search", {}), Policy()), progress_key(Call("search", {}), Policy(task_revision=True))
    ('search', '*')
    >>> progress_key(Call("search", {}, progress_key="documents"), Policy())
    'documents'
    """
    if call.progress_key is not None:
        return call.progress_key
    return TASK_KEY if policy.task_revision else call.tool


class KeyStep(NamedTuple):
    """What one verified result does to its progress key (a tuple: one is made per settled call)."""

    key: str
    current: int
    """The key's last revision when the result was verified (what its revision is compared with)."""
    advanced: bool = False
    """The key's revision went up."""
    task_revision: int | None = None
    """The task's revision to record (``None``: record no progress)."""
    stored: tuple[str, int] | None = None
    """The key's new revision to store (none for the task's own key: it is the task's revision)."""


class ProgressKeys:
    """The progress keys of a task (a part of the guard): each key's last revision, read from the store once."""

    task_id: str
    store: Store
    policy: Policy
    revision: int
    _keys: dict[str, int] | None

    def progress_revision(self, call: Call, ticket: Ticket | None = None) -> int:
        """The revision ``call``'s verify is compared with: the last one of its progress key (for the task's own
        key, the task's revision when ``ticket`` was authorized, or now)."""
        return self._key_revision(progress_key(call, self.policy), ticket)

    def _key_revision(self, key: str, ticket: Ticket | None = None) -> int:
        """:meth:`progress_revision` for a key already known (a settled call asks it once)."""
        if key == TASK_KEY:
            return ticket.revision if ticket is not None else self.revision
        if self._keys is None:
            self._keys = self.store.progress_keys(self.task_id)
        return self._keys.get(key, 0)

    def output_revision(self) -> int:
        """The revision a run's ``verify_output`` is compared with: the task's under ``Policy.task_revision``; else
        0, since it reports no key's progress (only its ``done`` counts)."""
        return self.revision if self.policy.task_revision else 0

    def _key_step(self, ticket: Ticket, proof: Evidence | None, key: str, *, record: bool) -> KeyStep:
        """How a result's evidence moves its key and the task (``proof`` None, or ``record`` False: it moves
        nothing; its key's current revision only)."""
        current = self._key_revision(key, ticket)
        if proof is None or not record:
            return KeyStep(key, current)
        if key == TASK_KEY:  # the article's rule: the task's revision is the verify's, raised to max(current, it)
            return KeyStep(key, current, proof.revision > current, proof.revision)
        if proof.revision <= current:
            return KeyStep(key, current, False, ticket.revision)  # no new revision: a stall of the task
        moved = max(self.revision, ticket.revision) + (proof.revision - current)
        return KeyStep(key, current, True, moved, (key, proof.revision))

    def _key_recorded(self, step: KeyStep, proof: Evidence) -> None:
        """The key's new revision was recorded in the store."""
        if step.stored is not None and self._keys is not None:
            self._keys[step.key] = max(self._keys.get(step.key, 0), proof.revision)
