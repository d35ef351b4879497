"""Pause notifications: a real webhook receiver on 127.0.0.1; retries that never block or fail the run."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from agents import Agent
from agents.testing import ScriptedModel, function_call

from agents_loopguard import Budget, Status
from agents_loopguard.sdk import run_guarded_sync
from agents_loopguard.sdk.notify import PauseNotifier
from agents_loopguard.store.sql import SQLStore
from tests.support.server_env import PLANTED, refund


class Receiver:
    """A webhook receiver that answers with the given statuses in turn (then 200), and can hold requests."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.bodies: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.release.set()
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                receiver.arrived.set()
                receiver.release.wait(30)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                receiver.bodies.append({"status": status, "body": body, "auth": self.headers.get("authorization")})
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hooks/T000/B000/secret-path-xyz"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLStore]:
    opened = SQLStore(f"sqlite:///{tmp_path / 'notify.db'}")
    yield opened
    opened.close()


def pause_run(store: SQLStore, notifier: PauseNotifier, task_id: str = "ticket-7") -> Any:
    call = function_call(
        "refund", {"order": 7, "note": "<https://evil.example|click> <!channel>", "api_key": PLANTED}, call_id="call-7"
    )
    agent = Agent(name="clerk", model=ScriptedModel([[call]]), tools=[refund])
    return run_guarded_sync(agent, "refund 7", budget=Budget(4, 4), store=store, task_id=task_id, on_pause=notifier)


def test_the_pause_is_stored_then_posted_with_retries(store: SQLStore) -> None:
    receiver = Receiver([500, 503])
    try:
        notifier = PauseNotifier(
            receiver.url, console_url="https://ops.example/", backoff=0.01, headers={"Authorization": "Bearer hook"}
        )
        outcome = pause_run(store, notifier)
        assert outcome.status is Status.NEEDS_HUMAN and store.pause(outcome.pause_id) is not None
        assert notifier.drain(timeout=30)
        assert [b["status"] for b in receiver.bodies] == [500, 503, 200]
        body = receiver.bodies[-1]["body"]
        assert receiver.bodies[-1]["auth"] == "Bearer hook"
        pause = body["pause"]
        assert pause["pause_id"] == outcome.pause_id and pause["task_id"] == "ticket-7"
        assert pause["console_url"] == f"https://ops.example/pauses/{outcome.pause_id}"
        [call] = pause["calls"]
        assert call["tool"] == "refund" and call["operation_id"] == "refund-order-7"
        assert call["arguments"]["api_key"] == "[redacted]" and PLANTED not in json.dumps(body)
        assert "&lt;https://evil.example|click&gt; &lt;!channel&gt;" in body["text"]  # no link, no mention
        assert f"<https://ops.example/pauses/{outcome.pause_id}|Decide in the console>" in body["text"]
        assert body["blocks"][0]["text"]["text"] == body["text"]
    finally:
        receiver.close()


def test_a_slow_receiver_never_holds_the_run(store: SQLStore) -> None:
    receiver = Receiver([])
    receiver.release.clear()  # the receiver takes the request and sits on it
    try:
        notifier = PauseNotifier(receiver.url, timeout=30)
        outcome = pause_run(store, notifier)
        assert outcome.status is Status.NEEDS_HUMAN
        assert receiver.arrived.wait(30) and receiver.bodies == []  # the run returned while the post is held
        receiver.release.set()
        assert notifier.drain(timeout=30) and len(receiver.bodies) == 1
    finally:
        receiver.close()


def test_an_unreachable_or_refusing_receiver_is_logged_and_the_run_goes_on(
    store: SQLStore, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver([404])
    closed = Receiver([])
    down_url = closed.url
    closed.close()
    caplog.set_level(logging.WARNING, logger="agents_loopguard.sdk.notify")
    try:
        refusing = PauseNotifier(receiver.url, backoff=0.01)
        assert pause_run(store, refusing, "ticket-8").status is Status.NEEDS_HUMAN
        assert refusing.drain(timeout=30) and [b["status"] for b in receiver.bodies] == [404]  # not retried
        down = PauseNotifier(down_url, attempts=2, backoff=0.01, timeout=2)
        assert pause_run(store, down, "ticket-9").status is Status.NEEDS_HUMAN
        assert down.drain(timeout=30)
    finally:
        receiver.close()
    messages = [r.getMessage() for r in caplog.records]
    assert any("refused: HTTP 404; giving up" in m for m in messages)
    assert any("attempt 2 of 2" in m and "giving up" in m for m in messages)
    assert all("secret-path-xyz" not in m for m in messages)  # the webhook URL is a secret: its host only


def test_a_bad_webhook_url_is_refused_when_the_notifier_is_made() -> None:
    for url in ("ftp://x", "not a url", "https://"):
        with pytest.raises(ValueError, match="http"):
            PauseNotifier(url)
