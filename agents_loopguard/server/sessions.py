"""Console logins and their CSRF tokens, kept in the server's memory (a restart logs everyone out).

A login with an operator token opens a session; the browser holds only a random session id in an HttpOnly,
SameSite=Lax cookie (never the token; the login form's own CSRF cookie is SameSite=Strict). Each session has its
own CSRF token, which every form carries and every POST must present; both are compared in constant time.

>>> from agents_loopguard.server.config import Principal
>>> sessions = Sessions(ttl=60, clock=lambda: 1000.0)
>>> sid, session = sessions.open(Principal("ana", "operator"))
>>> sessions.get(sid).principal.name, sessions.get("forged") is None
('ana', True)
>>> same_secret(session.csrf, session.csrf), same_secret(session.csrf, "x")
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .config import Principal

__all__ = ["Session", "Sessions", "new_secret", "same_secret"]


def new_secret() -> str:
    """A random, URL-safe secret of 256 bits."""
    return secrets.token_urlsafe(32)


def same_secret(presented: str | None, expected: str) -> bool:
    """Constant-time equality of two secrets (a missing one is never equal)."""
    if not presented:
        return False
    return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


def _key(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Session:
    """One console login."""

    principal: Principal
    csrf: str
    expires: float


class Sessions:
    """Open console sessions, by the hash of their id."""

    def __init__(self, *, ttl: float, clock: Callable[[], float] = time.time) -> None:
        self.ttl = ttl
        self.clock = clock
        self._open: dict[str, Session] = {}
        self._notes: dict[str, list[tuple[str, str]]] = {}
        self._lock = threading.Lock()

    def open(self, principal: Principal) -> tuple[str, Session]:
        """Start a session; return its id (for the cookie) and the session."""
        sid = new_secret()
        session = Session(principal, new_secret(), self.clock() + self.ttl)
        with self._lock:
            now = self.clock()
            for key in [k for k, s in self._open.items() if s.expires <= now]:
                del self._open[key]
                self._notes.pop(key, None)
            self._open[_key(sid)] = session
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        """The live session with this id, or None."""
        if not sid:
            return None
        with self._lock:
            session = self._open.get(_key(sid))
            if session is not None and session.expires <= self.clock():
                del self._open[_key(sid)]
                return None
            return session

    def close(self, sid: str | None) -> None:
        """End the session (logout)."""
        if sid:
            with self._lock:
                self._open.pop(_key(sid), None)
                self._notes.pop(_key(sid), None)

    def note(self, sid: str, kind: str, text: str) -> None:
        """Keep a message for the session's next page (what a POST did, or why it was refused)."""
        with self._lock:
            if _key(sid) in self._open:
                self._notes.setdefault(_key(sid), []).append((kind, text))

    def take_notes(self, sid: str | None) -> list[tuple[str, str]]:
        """The messages kept for this session, once."""
        if not sid:
            return []
        with self._lock:
            return self._notes.pop(_key(sid), [])
