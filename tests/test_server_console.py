"""The console over real HTTP (the browser test is tests/test_server_browser.py): login, cookies, CSRF, escaping."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from agents_loopguard.server import create_app
from agents_loopguard.store.sql import SQLStore
from tests.support.live_server import LiveServer
from tests.support.server_env import CONFIG, PLANTED, SECRETS, budget_stopped, lost_write, paused_task

SCRIPT = "<script>alert('pwned')</script>"


@pytest.fixture
def store(tmp_path: object) -> Iterator[SQLStore]:
    opened = SQLStore(f"sqlite:///{tmp_path}/console.db")
    yield opened
    opened.close()


@pytest.fixture
def server(store: SQLStore) -> Iterator[LiveServer]:
    with LiveServer(create_app(store, CONFIG)) as live:
        yield live


@pytest.fixture
def browser(server: LiveServer) -> Iterator[httpx.Client]:
    """A client that keeps cookies and does not follow redirects, like a browser's view of each answer."""
    with httpx.Client(base_url=server.url, timeout=30, follow_redirects=False) as http:
        yield http


def csrf_in(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has a form without a CSRF token"
    return found.group(1)


def log_in(browser: httpx.Client, name: str = "ana") -> str:
    """Log in through the form; return the session's CSRF token (from the next page)."""
    form = browser.get("/login")
    answer = browser.post("/login", data={"token": SECRETS[name], "csrf_token": csrf_in(form.text), "next": "/"})
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    return csrf_in(browser.get("/").text)


def test_pages_need_a_login_and_keep_where_you_were_going(browser: httpx.Client) -> None:
    for path in ("/", "/tasks?status=stopped", "/tasks/t-1", "/pauses/p-1"):
        answer = browser.get(path)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/login?next=")
    expired = browser.post("/tasks/t-1/stop", data={"reason": "x"})  # a form posted after the session ended
    assert expired.status_code == 303 and expired.headers["location"] == "/login?next=%2F"
    form = browser.get("/login?next=/tasks%3Fstatus%3Dstopped")
    answer = browser.post(
        "/login", data={"token": SECRETS["ana"], "csrf_token": csrf_in(form.text), "next": "/tasks?status=stopped"}
    )
    assert answer.headers["location"] == "/tasks?status=stopped"


def test_login_sets_an_httponly_samesite_session_cookie_holding_no_token(browser: httpx.Client) -> None:
    form = browser.get("/login")
    login_cookie = form.headers["set-cookie"]
    assert "HttpOnly" in login_cookie and "SameSite=strict" in login_cookie and "Path=/login" in login_cookie
    answer = browser.post("/login", data={"token": SECRETS["ana"], "csrf_token": csrf_in(form.text)})
    cookies = answer.headers.get_list("set-cookie")
    [session] = [c for c in cookies if c.startswith("loopguard_session=")]
    assert "HttpOnly" in session and "SameSite=lax" in session and "Path=/" in session
    assert all(secret not in session for secret in SECRETS.values())
    page = browser.get("/")
    assert page.status_code == 200 and "ana" in page.text


def test_login_refuses_a_missing_csrf_token_a_wrong_token_and_a_workflow_token(browser: httpx.Client) -> None:
    no_csrf = browser.post("/login", data={"token": SECRETS["ana"]})
    assert no_csrf.status_code == 403 and "loopguard_session" not in str(no_csrf.headers)
    form = browser.get("/login")
    wrong = browser.post("/login", data={"token": "guess-guess-guess-guess", "csrf_token": csrf_in(form.text)})
    assert wrong.status_code == 401 and "not valid" in wrong.text
    workflow = browser.post("/login", data={"token": SECRETS["n8n"], "csrf_token": csrf_in(wrong.text)})
    assert workflow.status_code == 401 and "not an operator token" in workflow.text
    assert "loopguard_session" not in str(workflow.headers)
    assert browser.get("/").status_code == 303


def test_login_never_redirects_to_another_site(browser: httpx.Client) -> None:
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        form = browser.get("/login")
        answer = browser.post(
            "/login", data={"token": SECRETS["ana"], "csrf_token": csrf_in(form.text), "next": target}
        )
        assert answer.headers["location"] == "/"


def test_every_form_post_without_the_csrf_token_is_403_and_changes_nothing(
    browser: httpx.Client, store: SQLStore
) -> None:
    pause_id = paused_task(store, "ticket-1")
    lost_write(store, "pay-3", "inv-3")
    budget_stopped(store, "search-2")
    log_in(browser)
    for path, data in [
        (f"/pauses/{pause_id}/decide", {"decision": "approve"}),
        ("/tasks/ticket-1/stop", {"reason": "x"}),
        ("/operations/inv-3/reconcile", {"answer": "committed"}),
        ("/tasks/search-2/recover", {"why": "x", "more_turns": "1"}),
        ("/logout", {}),
    ]:
        for token in (None, "forged-csrf-token"):
            answer = browser.post(path, data={**data, **({"csrf_token": token} if token else {})})
            assert answer.status_code == 403, (path, answer.text)
            assert "CSRF" in answer.text
    assert store.pause(pause_id).status == "pending"  # type: ignore[union-attr]
    assert store.task("ticket-1").stop_reason is None  # type: ignore[union-attr]
    assert str(store.lookup_operation("inv-3").state) == "unknown"  # type: ignore[union-attr]
    assert store.task("search-2").status == "stopped"  # type: ignore[union-attr]
    assert browser.get("/").status_code == 200  # still logged in


def test_the_inbox_shows_attacker_text_as_text_and_no_secret(browser: httpx.Client, store: SQLStore) -> None:
    paused_task(store, "ticket-<i>1</i>", note=SCRIPT)
    log_in(browser)
    page = browser.get("/").text
    assert SCRIPT not in page
    assert "<i>1</i>" not in page
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in page
    assert "ticket-&lt;i&gt;1&lt;/i&gt;" in page
    assert PLANTED not in page and "[redacted]" in page
    assert all(secret not in page for secret in SECRETS.values())
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"', page)
    task_page = browser.get("/tasks/ticket-%3Ci%3E1%3C%2Fi%3E").text
    assert SCRIPT not in task_page and PLANTED not in task_page and "ticket-&lt;i&gt;1&lt;/i&gt;" in task_page


def test_approve_from_the_inbox_records_the_logged_in_operator(browser: httpx.Client, store: SQLStore) -> None:
    pause_id = paused_task(store, "ticket-1", calls=2)
    csrf = log_in(browser, "bob")
    answer = browser.post(
        f"/pauses/{pause_id}/decide",
        data={"csrf_token": csrf, "decision": "each", "call:call-0": "approve", "call:call-1": "reject", "why": "ok"},
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    after = browser.get("/").text
    assert "call-0 approved, call-1 rejected" in after and "Nothing waits for a decision" in after
    stored = store.pause(pause_id)
    assert stored is not None and stored.decided_by == "bob"
    assert stored.decisions == {"call-0": "approve", "call-1": "reject"}
    again = browser.post(f"/pauses/{pause_id}/decide", data={"csrf_token": csrf, "decision": "reject"})
    assert again.status_code == 303 and "its decisions are final" in browser.get("/").text


def test_stop_reconcile_and_recover_forms(browser: httpx.Client, store: SQLStore) -> None:
    paused_task(store, "ticket-1")
    lost_write(store, "pay-3", "inv-3")
    budget_stopped(store, "search-2")
    csrf = log_in(browser)
    browser.post("/tasks/ticket-1/stop", data={"csrf_token": csrf, "reason": "customer called"})
    assert store.task("ticket-1").stop_reason == "customer called"  # type: ignore[union-attr]
    assert "stop mark" in browser.get("/tasks/ticket-1").text
    bad = browser.post(
        "/operations/inv-3/reconcile",
        data={"csrf_token": csrf, "answer": "committed", "result": "{not json", "back": "/tasks/pay-3"},
    )
    assert bad.headers["location"] == "/tasks/pay-3" and "not JSON" in browser.get("/tasks/pay-3").text
    browser.post(
        "/operations/inv-3/reconcile",
        data={"csrf_token": csrf, "answer": "committed", "why": "receipt", "result": '{"status": "ok"}'},
    )
    assert str(store.lookup_operation("inv-3").state) == "committed"  # type: ignore[union-attr]
    browser.post("/tasks/search-2/recover", data={"csrf_token": csrf, "why": "new pages", "more_turns": "2"})
    task = store.task("search-2")
    assert task is not None and task.status == "running" and task.budget.model_turns == 3 and task.used.models == 1
    [transition] = store.transitions("search-2")
    assert transition.who == "ana"


def test_the_reconcile_form_preselects_no_answer_and_refuses_none(browser: httpx.Client, store: SQLStore) -> None:
    """Issue 28: the form came with "committed: it happened" selected, one click from recording a guess."""
    lost_write(store, "pay-3", "inv-3")
    csrf = log_in(browser)
    page = browser.get("/tasks/pay-3").text
    form = re.search(r'<form[^>]*action="/operations/inv-3/reconcile".*?</form>', page, re.S)
    assert form is not None
    select = re.search(r'<select name="answer"([^>]*)>(.*?)</select>', form.group(0), re.S)
    assert select is not None and "required" in select.group(1)
    options = re.findall(r'<option value="([^"]*)"([^>]*)>', select.group(2))
    assert [value for value, attrs in options if "selected" in attrs] == [""]  # the placeholder, which is disabled
    assert [value for value, _ in options] == ["", "committed", "not_committed", "unknown"]
    answer = browser.post("/operations/inv-3/reconcile", data={"csrf_token": csrf, "why": "x", "back": "/tasks/pay-3"})
    assert answer.status_code == 303 and "choose what the receiver said" in browser.get("/tasks/pay-3").text
    assert str(store.lookup_operation("inv-3").state) == "unknown"  # type: ignore[union-attr]


def test_tasks_page_filters_by_status_and_unknown_ids_are_404(browser: httpx.Client, store: SQLStore) -> None:
    paused_task(store, "ticket-1")
    budget_stopped(store, "search-2")
    log_in(browser)
    stopped = browser.get("/tasks?status=stopped").text
    assert "search-2" in stopped and "ticket-1" not in stopped
    assert "ticket-1" in browser.get("/tasks?status=needs_human").text
    assert browser.get("/tasks?status=sleeping").status_code == 400
    missing = browser.get("/tasks/nope")
    assert missing.status_code == 404 and "no task" in missing.text


def test_logout_ends_the_session(browser: httpx.Client) -> None:
    csrf = log_in(browser)
    cookie = browser.cookies.get("loopguard_session")
    assert browser.post("/logout", data={"csrf_token": csrf}).headers["location"] == "/login"
    browser.cookies.set("loopguard_session", cookie or "")
    assert browser.get("/").status_code == 303  # the old cookie is worth nothing now


def test_static_files_and_security_headers(browser: httpx.Client) -> None:
    page = browser.get("/login")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert browser.get("/static/console.js").status_code == 200
    assert "text/css" in browser.get("/static/console.css").headers["content-type"]


def test_the_console_has_a_favicon_where_pages_name_it_and_where_browsers_look(browser: httpx.Client) -> None:
    """Issue 28: every page asked for /favicon.ico and got a 404."""
    page = browser.get("/login").text
    named = re.search(r'<link rel="icon" href="([^"]+)"', page)
    assert named is not None
    for path in (named.group(1), "/favicon.ico"):
        icon = browser.get(path)  # before any login: the icon shows nothing
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml"), path
        assert icon.text.startswith("<svg")
