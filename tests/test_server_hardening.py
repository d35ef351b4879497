"""The server's smaller promises of issue 21 (point 5), over HTTP against a live server: a chunked body over 1 MiB is
413 like a declared one, the console offers "Stop this task" only where a stop is an allowed next action, the login
page names the one-run token file, and a failed login's form cookie is Secure under ``--secure-cookies``."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from agents_loopguard import Budget, Guard
from agents_loopguard.server import ServerConfig, create_app
from agents_loopguard.server.app import MAX_BODY
from agents_loopguard.store.sql import SQLStore
from tests.support.live_server import LiveServer
from tests.support.server_env import CONFIG, SECRETS, TOKENS, bearer, budget_stopped


@pytest.fixture
def store(tmp_path: object) -> Iterator[SQLStore]:
    opened = SQLStore(f"sqlite:///{tmp_path}/hardening.db")
    yield opened
    opened.close()


@pytest.fixture
def url(store: SQLStore) -> Iterator[str]:
    with LiveServer(create_app(store, CONFIG)) as live:
        yield live.url


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    body = b'{"reason": "' + b"x" * total + b'"}'
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.mark.parametrize("total", [MAX_BODY + 1, 3 * MAX_BODY])
def test_a_chunked_body_over_the_limit_is_413_like_a_declared_one(url: str, store: SQLStore, total: int) -> None:
    Guard(budget=Budget(2, 2), store=store, task_id="t-big")
    with httpx.Client(base_url=url, timeout=30, headers=bearer("ana")) as api:
        chunked = api.post(
            "/api/v1/tasks/t-big/stop", content=chunks(total), headers={"content-type": "application/json"}
        )
        declared = api.post("/api/v1/tasks/t-big/stop", content=b"x" * (MAX_BODY + 1))
    assert "content-length" not in chunked.request.headers  # it really went chunked
    assert chunked.status_code == declared.status_code == 413, chunked.text
    assert chunked.json()["error"]["kind"] == "input"
    snapshot = store.task("t-big")
    assert snapshot is not None and snapshot.stop_reason is None  # nothing was done with the cut body


def test_a_chunked_body_under_the_limit_still_works(url: str, store: SQLStore) -> None:
    Guard(budget=Budget(2, 2), store=store, task_id="t-small")
    with httpx.Client(base_url=url, timeout=30, headers=bearer("ana")) as api:
        parts = iter([b'{"reason": ', b'"runaway"}'])
        answer = api.post("/api/v1/tasks/t-small/stop", content=parts, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert store.task("t-small").stop_reason == "runaway"  # type: ignore[union-attr]


def log_in(browser: httpx.Client) -> None:
    form = browser.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert token is not None
    done = browser.post("/login", data={"token": SECRETS["ana"], "csrf_token": token.group(1), "next": "/"})
    assert done.status_code == 303


def test_stop_this_task_shows_only_where_stop_is_an_allowed_next_action(url: str, store: SQLStore) -> None:
    Guard(budget=Budget(2, 2), store=store, task_id="t-running")
    budget_stopped(store, "t-finished")
    with httpx.Client(base_url=url, timeout=30, follow_redirects=False) as browser:
        log_in(browser)
        running = browser.get("/tasks/t-running").text
        finished = browser.get("/tasks/t-finished").text
    assert "Stop this task" in running
    assert "Stop this task" not in finished and "nothing to stop" in finished


def test_the_login_page_names_the_one_run_token_file(url: str) -> None:
    page = httpx.get(f"{url}/login").text
    assert "operator-token" in page and "LOOPGUARD_SERVER_TOKENS" in page


def test_a_failed_login_sets_its_form_cookie_secure_under_secure_cookies(store: SQLStore) -> None:
    app = create_app(store, ServerConfig(tokens=TOKENS, secure_cookies=True))
    with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=30) as browser:
        form = browser.get("/login")
        assert "secure" in form.headers["set-cookie"].lower()
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert csrf is not None
        sent = form.headers["set-cookie"].split(";")[0]  # a Secure cookie is not sent back over http: send it by hand
        failed = browser.post(
            "/login",
            data={"token": "not-a-token-of-this-server", "csrf_token": csrf.group(1)},
            headers={"cookie": sent},
        )
    assert failed.status_code == 401
    cookie = failed.headers["set-cookie"].lower()
    assert cookie.startswith("loopguard_login=") and "; secure" in cookie and "samesite=strict" in cookie
