"""R10, R18, R20: an operator asks the receiver with the write's own probe, from another process: the command
(``loopguard reconcile OP --probe --probes module:attribute``, a real subprocess), the HTTP API of a real server
(``POST /api/v1/operations/{op}/probe``) and the console's button in a real headless Chromium.

A real run (the raw loop over HTTP) loses a refund's answer on a SQLite store file: the tool has no probe in that
run, so the task ends ``needs_reconciliation``. The operator's process finds the probe in the registry it names
(``tests.support.probe_registry:PROBES``), which reads the refund provider's real records. The answer is recorded as
the probe's reconciliation; the task reopens; the next run returns the stored refund (committed) or sends it once
more (not_committed), counted in real bodies and the provider's rows.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents_loopguard import Budget, OperationState
from agents_loopguard.ops.probes import PROBES_ENV, load_probes
from agents_loopguard.server import ServerConfig, create_app
from agents_loopguard.store.sql import SQLStore
from tests.support.adapters import Calls, Say, run_scenario
from tests.support.live_server import LiveServer
from tests.support.receiver import Provider, Receiver
from tests.support.server_env import SECRETS, TOKENS, bearer

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = "tests.support.probe_registry:PROBES"
_SCRIPT = Path(sys.executable).with_name("loopguard")
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "agents_loopguard.cli"]
STEPS: list[Any] = [Calls(("refund", {"order_id": "A-17", "amount": 80})), Say("refunded")]


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Receiver:
    monkeypatch.setenv("PROBE_PROVIDER_DB", str(tmp_path / "provider.db"))
    return Receiver(tmp_path / "provider.db")


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def lost(url: str, provider: Provider, task_id: str = "t-op") -> None:
    """A real run whose refund's answer is lost, without a probe in the run: the task needs reconciliation."""
    store = SQLStore(url)
    try:
        outcome = run_scenario("chat", STEPS, [provider.tool()], budget=Budget(4, 6), store=store, task_id=task_id)
        assert (str(outcome.outcome.status), outcome.outcome.operation_id) == ("needs_reconciliation", "refund-A-17")
    finally:
        store.close()


def run_again(url: str, provider: Provider, task_id: str = "t-op") -> Any:
    store = SQLStore(url)
    try:
        return run_scenario("chat", STEPS, [provider.tool()], budget=Budget(4, 6), store=store, task_id=task_id).outcome
    finally:
        store.close()


def loopguard(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [*COMMAND, "--db", url, "--json", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def ledger(url: str) -> tuple[OperationState, list[tuple[str, str, str | None]]]:
    store = SQLStore(url)
    try:
        op = store.lookup_operation("refund-A-17")
        assert op is not None
        return op.state, [(t.kind, t.who, t.operation_id) for t in store.transitions(op.task_id)]
    finally:
        store.close()


def test_r20_the_command_asks_the_receiver_and_the_next_run_returns_the_stored_refund(
    receiver: Receiver, url: str
) -> None:
    provider = Provider(receiver, ["lost"], probe=None)
    lost(url, provider)
    done = loopguard(url, "reconcile", "refund-A-17", "--probe", "--probes", REGISTRY, "--who", "ana")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["state"], answer["task_reopened"], answer["probe"]["answer"]) == ("committed", True, "committed")
    assert answer["transition"]["who"] == "probe:refund"
    assert f"pid {os.getpid()}" not in answer["transition"]["why"]  # the probe ran in the command's process
    assert answer["transition"]["why"].endswith("(asked by ana)")
    assert ledger(url) == (OperationState.COMMITTED, [("reconcile", "probe:refund", "refund-A-17")])
    again = run_again(url, provider)
    assert (str(again.status), str(again.reason)) == ("completed", "validated_done")
    assert (provider.bodies, receiver.refunds()) == (1, 1)  # the stored refund, never a second one


def test_r20_not_committed_from_the_command_lets_the_next_run_send_it_once(receiver: Receiver, url: str) -> None:
    provider = Provider(receiver, ["refused"], probe=None)
    lost(url, provider)
    done = loopguard(url, "reconcile", "refund-A-17", "--probe", "--probes", REGISTRY)  # who: the user's name
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "not_committed"
    assert ledger(url)[0] is OperationState.NOT_COMMITTED
    again = run_again(url, provider)
    assert (str(again.status), provider.bodies, receiver.refunds()) == ("completed", 2, 1)


def test_r20_an_unknown_answer_records_nothing_and_a_missing_registry_is_named(receiver: Receiver, url: str) -> None:
    provider = Provider(receiver, ["lost"], probe=None)
    lost(url, provider)
    with sqlite3.connect(receiver.path) as db:
        db.execute("CREATE TABLE probe_mode (mode TEXT)")
        db.execute("INSERT INTO probe_mode VALUES ('unknown')")
    done = loopguard(url, "reconcile", "refund-A-17", "--probe", "--probes", REGISTRY, "--who", "ana")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["state"], answer["probe"]["answer"]) == ("unknown", "unknown")
    assert "stays unknown" in answer["message"]
    assert ledger(url) == (OperationState.UNKNOWN, [])
    missing = loopguard(url, "reconcile", "refund-A-17", "--probe", "--who", "ana")
    assert missing.returncode == 2 and PROBES_ENV in json.loads(missing.stdout)["error"]
    both = loopguard(url, "reconcile", "refund-A-17", "committed", "--probe", "--probes", REGISTRY, "--who", "a")
    assert both.returncode == 2 and "--probe records the probe's own answer" in json.loads(both.stdout)["error"]


@pytest.fixture
def server(url: str, receiver: Receiver) -> Iterator[LiveServer]:
    store = SQLStore(url)
    try:
        config = ServerConfig(tokens=TOKENS, probes=load_probes(REGISTRY))
        with LiveServer(create_app(store, config)) as live:
            yield live
    finally:
        store.close()


def test_r20_the_api_asks_the_receiver(server: LiveServer, url: str, receiver: Receiver) -> None:
    provider = Provider(receiver, ["lost"], probe=None)
    lost(url, provider)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        refused = client.post("/api/v1/operations/refund-A-17/probe", headers=bearer("n8n"))
        assert refused.status_code == 403  # a workflow token asks nothing of the ledger
        done = client.post("/api/v1/operations/refund-A-17/probe", headers=bearer("ana"))
        assert done.status_code == 200, done.text
        answer = done.json()
        assert (answer["state"], answer["transition"]["who"], answer["task_reopened"]) == (
            "committed",
            "probe:refund",
            True,
        )
        again = client.post("/api/v1/operations/refund-A-17/probe", headers=bearer("ana"))
        assert again.status_code == 409 and "already committed" in again.json()["error"]["message"]
        assert client.post("/api/v1/operations/nope/probe", headers=bearer("ana")).status_code == 404
    assert provider.bodies == 1


def test_r20_a_server_without_a_registry_says_how_to_give_it_one(url: str, receiver: Receiver) -> None:
    lost(url, Provider(receiver, ["lost"], probe=None))
    store = SQLStore(url)
    try:
        with LiveServer(create_app(store, ServerConfig(tokens=TOKENS))) as live:
            answer = httpx.post(f"{live.url}/api/v1/operations/refund-A-17/probe", headers=bearer("ana"), timeout=30)
    finally:
        store.close()
    assert answer.status_code == 400 and "--probes" in answer.json()["error"]["message"]
    assert ledger(url) == (OperationState.UNKNOWN, [])


CHROMIUM = "/usr/bin/chromium"


def test_r20_the_console_button_asks_the_receiver(server: LiveServer, url: str, receiver: Receiver) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    provider = Provider(receiver, ["lost"], probe=None)
    lost(url, provider)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{server.url}/login")
            page.fill("input[name=token]", SECRETS["ana"])
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/")
            page.goto(f"{server.url}/tasks/t-op")
            page.locator("form.probe button").click()
            page.wait_for_url(f"{server.url}/tasks/t-op")
            note = page.locator(".note-ok").inner_text()
            assert "refund-A-17: committed" in note and "reopened" in note, note
            assert page.locator("form.probe").count() == 0  # nothing unknown is left to ask about
        finally:
            browser.close()
    assert ledger(url) == (OperationState.COMMITTED, [("reconcile", "probe:refund", "refund-A-17")])
