"""Resume after a decision (issue 28, item 4): a decision, wherever it is made (the ``loopguard`` command, the API,
the console, ``approvals.decide``), is posted to a webhook, signed and retried; ``resume_decided`` resumes decided
pauses of given tasks or families, once across workers, the counters continuing.

Real parts: a webhook receiver over HTTP on 127.0.0.1 (it counts the requests it got), the ``loopguard`` command as
its own OS process, the server over HTTP, eight helper processes (``tests/workers/decided_worker.py``) racing on
one pause, and the refund receiver's journal (one line per body that ran).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents_loopguard.ops.approvals import decide
from agents_loopguard.ops.decisions import DecisionNotifier, decided_pauses
from agents_loopguard.ops.webhooks import verify_signature
from agents_loopguard.sdk import resume_decided_sync, run_guarded_sync
from agents_loopguard.server import create_app
from agents_loopguard.store.sql import SQLStore
from tests.support import forked
from tests.support.live_server import LiveServer
from tests.support.server_env import CONFIG, PLANTED, SECRETS, bearer, paused_task
from tests.test_cli import COMMAND

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))

import pause_app  # noqa: E402  (the application's agent code, shared with the helper processes)

SECRET = "whsec-test-5a1f0c9e7d3b"
HELPERS = 8


class Receiver:
    """A webhook receiver: answers the given statuses in turn (then 200) and keeps every request as it came."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["content-length"]))
                with receiver.lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.requests.append({"status": status, "raw": raw, "headers": dict(self.headers)})
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hooks/decisions"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def delivered(self) -> list[dict[str, Any]]:
        """The bodies that were accepted (2xx), decoded."""
        with self.lock:
            return [json.loads(r["raw"]) for r in self.requests if r["status"] == 200]

    def wait_for(self, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        give_up = time.monotonic() + timeout
        while len(self.delivered()) < count and time.monotonic() < give_up:
            time.sleep(0.02)
        return self.delivered()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    opened = Receiver()
    yield opened
    opened.close()


def _env(receiver: Receiver) -> dict[str, str]:
    return {
        "LOOPGUARD_DECISION_WEBHOOK": receiver.url,
        "LOOPGUARD_WEBHOOK_SECRET": SECRET,
        "LOOPGUARD_CONSOLE_URL": "https://ops.example/",
    }


def _cli(url: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*COMMAND, "--db", url, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    assert done.returncode == 0, done.stderr
    return done


def _signed(request: dict[str, Any]) -> bool:
    return verify_signature(request["raw"], request["headers"], SECRET)


def test_every_door_of_a_decision_posts_it_signed_and_retried(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command (its own process, which waits for the delivery before it exits), the API, the console and
    ``approvals.decide``: each decision is one accepted, signed request; a 503 is retried with the same delivery id."""
    url = f"sqlite:///{tmp_path / 'doors.db'}"
    store = SQLStore(url)
    try:
        pauses = {door: paused_task(store, f"ticket-{n}") for n, door in enumerate(("cli", "api", "console", "ops"))}
        receiver.statuses = [503]  # the first delivery fails: retried
        _cli(url, "approve", pauses["cli"], "--who", "ana", "--why", "photo shows damage", env=_env(receiver))
        assert len(receiver.delivered()) == 1  # delivered before the command exited
        for name, value in _env(receiver).items():
            monkeypatch.setenv(name, value)
        with LiveServer(create_app(store, CONFIG)) as server:
            with httpx.Client(base_url=server.url, timeout=30, headers=bearer("bob")) as api:
                answer = api.post(f"/api/v1/pauses/{pauses['api']}/decisions", json={"decision": "reject"})
                assert answer.status_code == 200, answer.text
            with httpx.Client(base_url=server.url, timeout=30) as browser:
                form = browser.get("/login")
                csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
                assert csrf is not None
                browser.post("/login", data={"token": SECRETS["ana"], "csrf_token": csrf.group(1), "next": "/"})
                token = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/").text)
                assert token is not None
                browser.post(
                    f"/pauses/{pauses['console']}/decide", data={"csrf_token": token.group(1), "decision": "approve"}
                )
            bodies = receiver.wait_for(3)
        monkeypatch.delenv("LOOPGUARD_DECISION_WEBHOOK")
        notifier = DecisionNotifier(receiver.url, secret=SECRET, backoff=0.01)
        decide(store, pauses["ops"], who="carla", reject_all=True, notify=notifier)
        assert notifier.drain(timeout=30)
    finally:
        store.close()
    bodies = receiver.delivered()
    assert len(bodies) == 4 and len(receiver.requests) == 5  # one retry, and nothing else
    assert all(_signed(r) for r in receiver.requests)
    first, retry = receiver.requests[:2]
    assert (
        first["status"] == 503 and first["headers"]["X-Loopguard-Delivery"] == retry["headers"]["X-Loopguard-Delivery"]
    )
    assert {r["headers"]["X-Loopguard-Event"] for r in receiver.requests} == {"pause.decided"}
    by_pause = {b["decision"]["pause_id"]: b for b in bodies}
    expected = {
        "cli": ("ana", "approve"),
        "api": ("bob", "reject"),
        "console": ("ana", "approve"),
        "ops": ("carla", "reject"),
    }
    for door, (who, verb) in expected.items():
        decision = by_pause[pauses[door]]["decision"]
        assert (decision["decided_by"], decision["decisions"]) == (who, {"call-0": verb}), door
        assert decision["task_id"].startswith("ticket-") and decision["family"] == "ticket"
        assert decision["calls"][0]["arguments"]["order"] == 40 and decision["calls"][0]["decision"] == verb
    cli = by_pause[pauses["cli"]]
    assert cli["decision"]["decided_why"] == "photo shows damage"
    assert cli["decision"]["console_url"] == f"https://ops.example/pauses/{pauses['cli']}"
    assert cli["text"].startswith(f"Pause {pauses['cli']} of task ticket-0 decided by ana: 1 approved, 0 rejected")
    assert PLANTED not in json.dumps(bodies)  # the arguments as the store redacted them
    tampered = dict(receiver.requests[1])
    tampered["raw"] = tampered["raw"].replace(b'"approve"', b'"reject"')
    assert not _signed(tampered)


def test_a_decision_is_recorded_whatever_happens_to_its_notice(tmp_path: Path) -> None:
    closed = Receiver()
    closed.close()  # nobody listens there any more
    store = SQLStore(f"sqlite:///{tmp_path / 'down.db'}")
    try:
        pause_id = paused_task(store, "ticket-9")
        notifier = DecisionNotifier(closed.url, attempts=2, backoff=0.01, timeout=2)
        decided = decide(store, pause_id, who="ana", approve_all=True, notify=notifier)
        assert decided.status == "decided" and notifier.drain(timeout=30)

        def broken(store: Any, record: Any) -> None:
            raise RuntimeError("the notifier itself is broken")

        other = paused_task(store, "ticket-10")
        assert decide(store, other, who="ana", approve_all=True, notify=broken).status == "decided"
    finally:
        store.close()


def test_resume_decided_needs_tasks_or_families_and_finds_only_theirs(tmp_path: Path) -> None:
    store = SQLStore(f"sqlite:///{tmp_path / 'scope.db'}")
    try:
        mine, theirs = paused_task(store, "ticket-1"), paused_task(store, "refund-2")
        for pause_id in (mine, theirs):
            decide(store, pause_id, who="ana", approve_all=True)
        with pytest.raises(ValueError, match="tasks= or families="):
            resume_decided_sync(pause_app.build_agent("once", "after"), store=store, who="w")
        assert [p.pause_id for p in decided_pauses(store, families=["ticket"])] == [mine]
        assert [p.pause_id for p in decided_pauses(store, tasks=["refund-2"])] == [theirs]
    finally:
        store.close()


@pytest.mark.timeout(300)
def test_eight_helper_processes_resume_a_decided_pause_once_with_the_counters_continuing(
    sql_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    """Done when of issue 28: a decided pause is resumed by the helper in another process, once, with 8 concurrent
    helpers. The pause is stored here; eight helper processes wait for a decision on its task; the decision is
    made with ``loopguard approve`` (a ninth process) and posted, signed, to the webhook; exactly one helper
    resumes it: one refund body ran, one ``resume`` transition, the counters go on from the pause."""
    journal = tmp_path / "sent.txt"
    store = SQLStore(sql_url)
    try:
        paused = run_guarded_sync(
            pause_app.build_agent("once", "before"),
            "please help",
            budget=pause_app.BUDGETS["once"],
            store=store,
            task_id="ticket-8",
        )
        assert paused.pause_id and (paused.used.models, paused.used.tools) == (1, 0)
        env = {**os.environ, "PYTHONPATH": str(WORKERS.parents[1]), pause_app.SENT_ENV: str(journal)}
        helpers = []
        for n in range(HELPERS):
            job = {
                "url": sql_url,
                "tasks": ["ticket-8"],
                "scenario": "once",
                "who": f"helper-{n}",
                "wait": 240,
                "ready": str(tmp_path / f"ready-{n}"),
            }
            helpers.append(
                forked.ForkedPopen(
                    [sys.executable, str(WORKERS / "decided_worker.py"), json.dumps(job)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        give_up = time.monotonic() + 180
        while not all((tmp_path / f"ready-{n}").exists() for n in range(HELPERS)):
            assert all(h.poll() is None for h in helpers), [h.communicate() for h in helpers if h.poll() is not None]
            assert time.monotonic() < give_up, "the helpers did not start"
            time.sleep(0.05)
        assert pause_app.executions(journal) == []  # nothing resumes an undecided pause
        _cli(sql_url, "approve", paused.pause_id, "--who", "ana", env=_env(receiver))
        answers = []
        for helper in helpers:
            out, err = helper.communicate(timeout=240)
            assert helper.returncode == 0, err
            answers.append(json.loads(out.strip().splitlines()[-1]))
        resumed = [(a["pid"], m) for a in answers for m in a["met"] if m["resumed"]]
        assert len(resumed) == 1, answers
        [(pid, winner)] = resumed
        assert pid != os.getpid() and winner["pause_id"] == paused.pause_id
        others = [m for a in answers for m in a["met"] if not m["resumed"]]
        assert all(m["claimed_elsewhere"] for m in others), others  # the losers saw it claimed, nothing else
        assert pause_app.executions(journal) == [f"refund-order-7 pid={pid}"]  # one body, in the winner
        assert [t.kind for t in store.transitions("ticket-8")] == ["resume"]
        record = store.pause(paused.pause_id)
        assert record is not None and record.status == "resumed" and record.decided_by == "ana"
        assert record.resumed_by == f"helper-{[a['pid'] for a in answers].index(pid)}"
        assert winner["outcome"]["used"]["models"] == 2 and winner["outcome"]["used"]["tools"] == 1  # 1 -> 2, 0 -> 1
        task = store.task("ticket-8")
        assert task is not None and (task.used.models, task.used.tools) == (2, 1)
    finally:
        store.close()
    [notice] = receiver.delivered()
    assert len(receiver.requests) == 1 and _signed(receiver.requests[0])
    assert notice["decision"]["pause_id"] == paused.pause_id and notice["decision"]["decisions"] == {
        call["call_id"]: "approve" for call in notice["decision"]["calls"]
    }
