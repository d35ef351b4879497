"""Who is calling: bearer tokens for the API, the session cookie and CSRF tokens for the console.

The API takes ``Authorization: Bearer <secret>`` only (never a cookie, so a browser cannot be tricked into calling
it); the console takes its session cookie and checks a CSRF token on every POST. Failures raise :class:`AuthError`,
which the app answers with 401 (who are you?) or 403 (not allowed), as JSON for the API.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Request

from .config import METRICS, Principal, ServerConfig, Tokens
from .sessions import Session, Sessions, same_secret

__all__ = [
    "LOGIN_COOKIE",
    "SESSION_COOKIE",
    "AuthError",
    "Forbidden",
    "NeedsLogin",
    "Unauthorized",
    "api_caller",
    "api_metrics",
    "api_operator",
    "check_csrf",
    "console_session",
]

SESSION_COOKIE = "loopguard_session"
"""The console's session cookie: a random id (HttpOnly, SameSite=Lax, so a link from elsewhere opens the console
logged in, while a cross-site POST carries no cookie); the token itself never reaches it."""
LOGIN_COOKIE = "loopguard_login"
"""The login form's CSRF cookie (double submit: the form carries the same value)."""


class AuthError(Exception):
    """The caller is not authenticated (401) or not allowed (403); the message names no secret."""

    status = 403

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthorized(AuthError):
    """No valid credentials."""

    status = 401


class Forbidden(AuthError):
    """Valid credentials, but this action is not in the token's scope (or the CSRF token is missing)."""

    status = 403


class NeedsLogin(AuthError):
    """A console page without a live session: the app redirects to the login form."""

    status = 401


@dataclass(frozen=True)
class _State:
    tokens: Tokens
    sessions: Sessions
    config: ServerConfig


def _state(request: Request) -> _State:
    app_state = request.app.state
    return _State(app_state.config.tokens, app_state.sessions, app_state.config)


def api_caller(request: Request) -> Principal:
    """The principal of the request's bearer token (401 without one)."""
    header = request.headers.get("authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise Unauthorized("send the API token as 'Authorization: Bearer <token>'")
    principal = _state(request).tokens.authenticate(presented.strip())
    if principal is None:
        raise Unauthorized("the bearer token is not valid")
    return principal


def api_operator(caller: Principal = Depends(api_caller)) -> Principal:  # noqa: B008 - FastAPI's dependency idiom
    """The caller, if it holds an operator token (403 for a workflow token)."""
    if not caller.operator:
        raise Forbidden(f"token {caller.name!r} has the {caller.scope} scope: this needs an operator token")
    return caller


def api_metrics(caller: Principal = Depends(api_caller)) -> Principal:  # noqa: B008 - FastAPI's dependency idiom
    """The caller, if it may scrape ``/metrics``: a metrics or an operator token (403 for a workflow token)."""
    if not (caller.operator or caller.scope == METRICS):
        raise Forbidden(f"token {caller.name!r} has the {caller.scope} scope: /metrics needs a metrics token")
    return caller


def console_session(request: Request) -> Session:
    """The console's live session (NeedsLogin without one)."""
    session = _state(request).sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is None:
        raise NeedsLogin("log in with an operator token")
    return session


def check_csrf(session: Session, presented: str | None) -> None:
    """Refuse a console POST whose form does not carry the session's CSRF token (403)."""
    if not same_secret(presented, session.csrf):
        raise Forbidden("the form's CSRF token is missing or stale: reload the page and submit it again")
