"""The operators' web console: server-rendered pages over :mod:`agents_loopguard.ops.operator`, no front-end build.

Pages: the approvals inbox (``/``), tasks with status filters (``/tasks``), a task with its timeline and ledger
(``/tasks/{id}``), a pause (``/pauses/{id}``). Forms: approve or reject a pause's calls with a note, stop a task,
reconcile an unknown write, recover a stopped task. Every form carries the session's CSRF token; every value is
rendered through Jinja2's autoescaping (tool arguments are attacker-controlled text); times are ISO UTC in a
``<time>`` element that ``console.js`` shows in the viewer's zone. A POST answers with a redirect (post, redirect,
get) and leaves a note for the next page.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from ..ops import measures, operator, pages
from ..ops.probes import probe_operation
from ..store.base import Store
from ..values.errors import InputError, LoopguardError
from .auth import LOGIN_COOKIE, SESSION_COOKIE, Forbidden, check_csrf, console_session
from .config import ServerConfig
from .sessions import Session, Sessions, new_secret, same_secret

__all__ = ["router", "templates"]

HERE = Path(__file__).parent
PAGE_SIZE = 50
TIMELINE_SHOWN = 200
STATUS_LABELS = {
    "running": "running",
    "reopened": "reopened",
    "completed": "completed",
    "partial": "partial",
    "stopped": "stopped",
    "needs_human": "needs human",
    "needs_reconciliation": "needs reconciliation",
}


def _pretty(value: Any) -> str:
    """JSON for people: indented, keys sorted, non-ASCII kept (escaping for HTML is the template's job)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every value, in every template: tool arguments are attacker-controlled text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = _pretty
    env.filters["status_label"] = lambda s: STATUS_LABELS.get(str(s), str(s))
    env.filters["slug"] = lambda s: str(s or "none").replace(" ", "_")
    env.filters["url"] = lambda s: quote(str(s), safe="")
    return env


templates = Jinja2Templates(env=_environment())
router = APIRouter(include_in_schema=False)
Console = Depends(console_session)


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


def _config(request: Request) -> ServerConfig:
    config: ServerConfig = request.app.state.config
    return config


def _page(request: Request, name: str, session: Session | None, status_code: int = 200, **context: Any) -> Response:
    notes = _sessions(request).take_notes(request.cookies.get(SESSION_COOKIE)) if session else []
    inbox = measures.pending_count(_store(request)) if session else 0
    return templates.TemplateResponse(
        request,
        name,
        {
            "session": session,
            "csrf": session.csrf if session else "",
            "notes": notes,
            "inbox_count": inbox,
            "title": _config(request).title,
            **context,
        },
        status_code=status_code,
    )


def safe_next(target: str | None) -> str:
    """A local path to go to after login; anything else (another site, a scheme) goes to the inbox.

    >>> safe_next("/tasks?status=stopped"), safe_next("//evil.example/x"), safe_next("https://evil.example")
    ('/tasks?status=stopped', '/', '/')
    """
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


# --- login ----------------------------------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> Response:
    """The login form (an operator token); it sets the login CSRF cookie that the form must echo."""
    value = new_secret()
    response = _page(request, "login.html", None, login_csrf=value, next=safe_next(next), error=None)
    return _with_login_cookie(request, response, value)


def _with_login_cookie(request: Request, response: Response, value: str) -> Response:
    """The login form's CSRF cookie (SameSite=Strict, only for /login; Secure with ``--secure-cookies``)."""
    response.set_cookie(
        LOGIN_COOKIE,
        value,
        httponly=True,
        samesite="strict",
        secure=_config(request).secure_cookies,
        path="/login",
        max_age=3600,
    )
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the token and the login CSRF pair; open a session (HttpOnly, SameSite cookie) and go on."""
    form = await request.form()
    target = safe_next(_field(form, "next"))
    if not same_secret(_field(form, "csrf_token"), request.cookies.get(LOGIN_COOKIE) or "\x00"):
        raise Forbidden("the login form's CSRF token is missing or stale: reload the login page")
    principal = _config(request).tokens.authenticate(_field(form, "token").strip())
    if principal is None or not principal.operator:
        error = "That token is not an operator token of this server." if principal else "That token is not valid."
        value = new_secret()
        response = _page(request, "login.html", None, 401, login_csrf=value, next=target, error=error)
        return _with_login_cookie(request, response, value)
    sid, _ = _sessions(request).open(principal)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        sid,
        httponly=True,
        samesite="lax",
        secure=_config(request).secure_cookies,
        path="/",
        max_age=int(_config(request).session_ttl),
    )
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


@router.post("/logout")
async def logout(request: Request, session: Session = Console) -> Response:
    """End the session."""
    check_csrf(session, _field(await request.form(), "csrf_token"))
    _sessions(request).close(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# --- pages ----------------------------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def inbox(request: Request, cursor: str = "", session: Session = Console) -> Response:
    """The approvals inbox: the pending calls (oldest first, a page at a time), their redacted arguments, their
    task's counters and budget left."""
    page = pages.pause_page(_store(request), status="pending", cursor=cursor or None, limit=PAGE_SIZE)
    return _page(request, "inbox.html", session, pauses=page["pauses"], next=page["next"], cursor=cursor)


@router.get("/tasks", response_class=HTMLResponse)
def tasks(
    request: Request,
    status: str = "",
    family: str = "",
    prefix: str = "",
    cursor: str = "",
    session: Session = Console,
) -> Response:
    """Tasks, newest first, filtered by status, family and id prefix, a page of 50 at a time ("next page")."""
    page = pages.task_page(
        _store(request),
        status=status or None,
        family=family or None,
        prefix=prefix or None,
        cursor=cursor or None,
        limit=PAGE_SIZE,
    )
    return _page(
        request,
        "tasks.html",
        session,
        rows=page["tasks"],
        next=page["next"],
        cursor=cursor,
        status=status,
        family=family,
        prefix=prefix,
        statuses=pages.TASK_STATUSES,
    )


@router.get("/tasks/{task_id:path}", response_class=HTMLResponse)
def task(request: Request, task_id: str, cursor: str = "", session: Session = Console) -> Response:
    """One task: counters against limits, stop and recover forms, timeline (a page, "earlier steps"), ledger with
    reconcile forms."""
    view = operator.task_view(_store(request), task_id, limit=TIMELINE_SHOWN, cursor=cursor or None)
    probed = sorted(_config(request).probes)
    return _page(request, "task.html", session, view=view, t=view["task"], probed=probed)


@router.get("/pauses/{pause_id:path}", response_class=HTMLResponse)
def pause(request: Request, pause_id: str, session: Session = Console) -> Response:
    """One pause, decided or not, with its decision form while it is pending."""
    view = operator.pause_view(_store(request), pause_id)
    return _page(request, "pause.html", session, p=view)


# --- actions --------------------------------------------------------------------------------------------------------


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


async def _act(request: Request, session: Session, back: str, action: Callable[[FormData], dict[str, Any]]) -> Response:
    """Check the CSRF token, run ``action`` off the event loop, note its message or its refusal, redirect."""
    form = await request.form()
    check_csrf(session, _field(form, "csrf_token"))
    sid = request.cookies.get(SESSION_COOKIE) or ""
    try:
        done = await run_in_threadpool(action, form)
    except LoopguardError as exc:
        _sessions(request).note(sid, "error", str(exc))
    else:
        _sessions(request).note(sid, "ok", str(done.get("message") or "done"))
    return RedirectResponse(back, status_code=303)


def _decisions(form: FormData) -> tuple[list[str], list[str]]:
    approve: list[str] = []
    reject: list[str] = []
    for key, value in form.multi_items():
        if key.startswith("call:") and isinstance(value, str):
            (approve if value == "approve" else reject if value == "reject" else []).append(key[len("call:") :])
    return approve, reject


@router.post("/pauses/{pause_id:path}/decide")
async def decide(request: Request, pause_id: str, session: Session = Console) -> Response:
    """Approve or reject the pause's calls (all, or each as chosen), with a note; recorded as the operator."""
    store, who = _store(request), session.principal.name

    def action(form: FormData) -> dict[str, Any]:
        verb = _field(form, "decision")
        approve, reject = _decisions(form) if verb == "each" else ([], [])
        if verb not in ("approve", "reject", "each"):
            raise InputError("choose approve, reject, or a decision for each call")
        return operator.decide_pause(
            store,
            pause_id,
            who=who,
            approve=approve,
            reject=reject,
            approve_all=verb == "approve",
            reject_all=verb == "reject",
            why=_field(form, "why"),
        )

    return await _act(request, session, safe_next(_field(await request.form(), "back")), action)


@router.post("/tasks/{task_id:path}/stop")
async def stop(request: Request, task_id: str, session: Session = Console) -> Response:
    """Set the task's stop mark, as the logged-in operator."""
    store, who = _store(request), session.principal.name

    def action(form: FormData) -> dict[str, Any]:
        return operator.stop_task(store, task_id, reason=_field(form, "reason") or "operator", who=who)

    return await _act(request, session, f"/tasks/{quote(task_id, safe='')}", action)


@router.post("/operations/{operation_id:path}/reconcile")
async def reconcile(request: Request, operation_id: str, session: Session = Console) -> Response:
    """Record what the receiving system says about an unknown write."""
    store, who = _store(request), session.principal.name

    def action(form: FormData) -> dict[str, Any]:
        if not _field(form, "answer"):
            raise InputError("choose what the receiver said (committed, not committed, unknown); nothing was recorded")
        raw = _field(form, "result").strip()
        try:
            result = json.loads(raw) if raw else None
        except ValueError as exc:
            raise InputError(f"the result is not JSON: {exc}") from None
        return operator.reconcile_operation(
            store, operation_id, _field(form, "answer"), who=who, why=_field(form, "why"), result=result
        )

    return await _act(request, session, safe_next(_field(await request.form(), "back")), action)


@router.post("/operations/{operation_id:path}/probe")
async def probe(request: Request, operation_id: str, session: Session = Console) -> Response:
    """Ask the receiver about an unknown write with its tool's probe, as the logged-in operator."""
    store, who, probes = _store(request), session.principal.name, _config(request).probes

    def action(form: FormData) -> dict[str, Any]:
        if not probes:
            raise InputError("this server has no registry of probes: start it with `loopguard serve --probes ...`")
        return probe_operation(store, operation_id, probes, who=who)

    return await _act(request, session, safe_next(_field(await request.form(), "back")), action)


@router.post("/tasks/{task_id:path}/recover")
async def recover(request: Request, task_id: str, session: Session = Console) -> Response:
    """Reopen a stopped or partial task by a recorded decision, optionally with more turns or executions."""
    store, who = _store(request), session.principal.name

    def action(form: FormData) -> dict[str, Any]:
        extend = {}
        for field_name, key in (("more_turns", "model_turns"), ("more_tools", "tool_executions")):
            raw = _field(form, field_name).strip() or "0"
            if not raw.isdigit():
                raise InputError(f"{field_name} must be a whole number >= 0")
            if int(raw):
                extend[key] = int(raw)
        return operator.recover_task(store, task_id, who=who, why=_field(form, "why"), extend=extend)

    return await _act(request, session, f"/tasks/{quote(task_id, safe='')}", action)
