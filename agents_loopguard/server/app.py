"""The application: the JSON API (``/api/v1``) and the console, over one store, with the errors and headers they share.

>>> from agents_loopguard import MemoryStore
>>> app = create_app(MemoryStore(), ServerConfig())
>>> [path for path in app.openapi()["paths"] if path.startswith("/api/v1/pauses")]
['/api/v1/pauses', '/api/v1/pauses/{pause_id}', '/api/v1/pauses/{pause_id}/decisions']
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException

from ..store.base import Store
from ..values.canonical import redact
from ..values.errors import LoopguardError, error_kind, exit_code, http_status
from . import api, console, metrics
from .auth import AuthError, NeedsLogin, Unauthorized
from .config import ServerConfig
from .sessions import Sessions

__all__ = ["MAX_BODY", "create_app"]

log = logging.getLogger("agents_loopguard.server")
MAX_BODY = 1 << 20
"""Request bodies larger than this (1 MiB) are refused with 413 before they are read."""
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path == "/metrics"


def _error(status: int, kind: str, message: str, *, error_type: str, code: int = 2) -> dict[str, Any]:
    return {
        "error": {
            "status": status,
            "kind": kind,
            "type": error_type,
            "exit_code": code,
            "message": str(redact(message)),
        }
    }


def _answer(request: Request, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    if _is_api(request):
        return JSONResponse(body, status_code=status, headers=headers)
    return console.templates.TemplateResponse(
        request,
        "error.html",
        {"session": None, "csrf": "", "notes": [], "inbox_count": 0, "title": "loopguard", "error": body["error"]},
        status_code=status,
    )


async def _loopguard_error(request: Request, exc: Exception) -> Response:
    status = http_status(exc)
    body = _error(status, error_kind(exc), str(exc), error_type=type(exc).__name__, code=exit_code(exc))
    return _answer(request, status, body)


async def _auth_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AuthError)
    if isinstance(exc, NeedsLogin) and not _is_api(request):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        target = target if request.method == "GET" else "/"  # after login, a form is not re-posted: start over
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    kind = "unauthorized" if exc.status == 401 else "forbidden"
    return _answer(request, exc.status, _error(exc.status, kind, exc.message, error_type=type(exc).__name__), headers)


async def _invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(part) for part in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()[:10]
    )  # the locations and messages only: never the values sent, which may hold a secret
    return _answer(request, 400, _error(400, "input", problems or "invalid request", error_type="InputError"))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found" if exc.status_code == 404 else "input"
    return _answer(request, exc.status_code, _error(exc.status_code, kind, str(exc.detail), error_type="HTTPError"))


async def _store_fault(request: Request, exc: Exception) -> Response:
    cause = getattr(exc, "orig", None) or exc
    log.error("the store failed: %s: %s", type(cause).__name__, redact(str(cause)))
    message = f"the store cannot be used right now ({type(cause).__name__}); try again, or see the server's log"
    return _answer(request, 503, _error(503, "store", message, error_type="StoreError"))


class _Guarded:
    """Security headers on every answer, and request bodies over :data:`MAX_BODY` refused with 413."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > MAX_BODY:
            await self._too_large(send)
            return
        path = str(scope.get("path", ""))
        static = path.startswith("/static/") or path == "/favicon.ico"

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.lower().encode(), v.encode()) for k, v in _HEADERS.items()]
                if not static:
                    extra.append((b"cache-control", b"no-store"))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        received, cut, started = 0, False, False

        async def bounded() -> Message:
            nonlocal received, cut
            message = await receive()
            received += len(message.get("body", b""))
            if received > MAX_BODY:  # a chunked body has no length to refuse up front
                cut = True
                raise _TooLarge
            return message

        async def answer(message: Message) -> None:
            nonlocal started
            if cut and not started:  # the app's answer to a body cut short (FastAPI says 400) becomes the 413
                return
            started = True
            await with_headers(message)

        with contextlib.suppress(_TooLarge):
            await self.app(scope, bounded, answer)
        if cut and not started:
            await self._too_large(send)

    @staticmethod
    async def _too_large(send: Send) -> None:
        body = JSONResponse(_error(413, "input", f"the request body is over {MAX_BODY} bytes", error_type="InputError"))
        await send({"type": "http.response.start", "status": 413, "headers": body.raw_headers})
        await send({"type": "http.response.body", "body": body.body})


class _TooLarge(Exception):
    pass


def _favicon() -> Response:
    """The console's icon where browsers look for it without reading a page (no login: it shows nothing)."""
    return FileResponse(console.HERE / "static" / "favicon.svg", media_type="image/svg+xml")


def create_app(store: Store, config: ServerConfig | None = None) -> FastAPI:
    """The API and the console over ``store`` (the caller owns the store: close it after the server stops)."""
    config = config or ServerConfig()
    app = FastAPI(
        title="agents_loopguard",
        summary="Operators' API for guarded agent tasks, and trigger activations for external workflows.",
        version="1",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.state.store = store
    app.state.config = config
    app.state.sessions = Sessions(ttl=config.session_ttl)
    app.state.metrics = metrics.StoreCollector(store)
    app.add_exception_handler(LoopguardError, _loopguard_error)
    app.add_exception_handler(AuthError, _auth_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(SQLAlchemyError, _store_fault)
    app.include_router(api.router)
    app.include_router(metrics.router)
    app.include_router(console.router)
    app.mount("/static", StaticFiles(directory=console.HERE / "static"), name="static")
    app.add_api_route("/favicon.ico", _favicon, include_in_schema=False)  # asked for by browsers whatever the page
    app.add_middleware(_Guarded)
    return app
