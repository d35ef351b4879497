"""The digest of a stored pause: a value of the pause, sealed when it is saved and checked before a resume (see
:mod:`agents_loopguard.ops.approvals` for what the digests protect and what they do not).

With a key (``$LOOPGUARD_PAUSE_KEY``, or ``key=``) a digest is HMAC-SHA256 (``hmac-sha256:...``); without one, plain
SHA-256.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .canonical import canonical_json

__all__ = ["KEYED", "PAUSE_KEY_ENV", "digest_key", "pause_body", "pause_digest", "seal"]

PAUSE_KEY_ENV = "LOOPGUARD_PAUSE_KEY"
"""The environment variable that holds the key of the pause digests (read when a function gets no ``key=``)."""
KEYED = "hmac-sha256:"
"""The prefix of a keyed digest."""


def digest_key(key: str | bytes | None) -> bytes | None:
    """The key to seal and check digests with: ``key``, else ``$LOOPGUARD_PAUSE_KEY``; None without one (an empty
    ``key`` means none, whatever the environment says)."""
    chosen = os.environ.get(PAUSE_KEY_ENV) if key is None else key
    if not chosen:
        return None
    return chosen.encode() if isinstance(chosen, str) else chosen


def seal(body: bytes, key: bytes | None) -> str:
    """``body``'s digest: HMAC-SHA256 with ``key`` (prefixed ``hmac-sha256:``), plain SHA-256 without."""
    if key is None:
        return hashlib.sha256(body).hexdigest()
    return KEYED + hmac.new(key, body, hashlib.sha256).hexdigest()


def pause_body(task_id: str, state: str, pending_calls: Sequence[Mapping[str, Any]]) -> bytes:
    return canonical_json({"task_id": task_id, "state": state, "pending_calls": [dict(c) for c in pending_calls]})


def pause_digest(
    task_id: str, state: str, pending_calls: Sequence[Mapping[str, Any]], *, key: str | bytes | None = None
) -> str:
    """The digest of a pause: over the canonical JSON of the task id, the serialized run state and the pending
    calls; HMAC-SHA256 with a key (``key``, else ``$LOOPGUARD_PAUSE_KEY``; ``key=""``: none), SHA-256 without.

    >>> len(pause_digest("t1", "{}", [{"call_id": "c1", "tool": "pay"}], key=""))
    64
    >>> pause_digest("t1", "{}", [], key="k").startswith("hmac-sha256:")
    True
    """
    return seal(pause_body(task_id, state, pending_calls), digest_key(key))
