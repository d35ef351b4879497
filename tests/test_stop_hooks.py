"""The stop mark says whether it was newly set, atomically, and records who set it; stop hooks fire once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, Guard, MemoryStore, NotFoundError, Reason, Status
from agents_loopguard.ops.stops import register_stop_hook, request_stop
from agents_loopguard.store.base import Store
from tests.support import forked
from tests.support.stop_probe import explode

RACER = """
import json, sys, time
from pathlib import Path
from agents_loopguard.store.sql import SQLStore
url, who, barrier = sys.argv[1], sys.argv[2], Path(sys.argv[3])
store = SQLStore(url)
store.task("t")  # connect before the race
(barrier / f"ready-{who}").touch()
while not (barrier / "go").exists():
    time.sleep(0.001)
mark = store.set_stop_mark("t", f"stopped by {who}", who=who, now=time.time())
print(json.dumps({"who": who, "newly_set": mark.newly_set, "reason": mark.task.stop_reason}))
store.close()
"""


def test_the_first_mark_wins_and_says_so(store_factory: Callable[[], Store]) -> None:
    store = store_factory()
    with pytest.raises(NotFoundError):
        store.set_stop_mark("nope", "x", who="ana")
    Guard(budget=Budget(3, 3), store=store, task_id="t")
    first = store.set_stop_mark("t", "runaway", who="ana", now=5.0)
    again = store.set_stop_mark("t", "other", who="bob", now=6.0)
    assert (first.newly_set, first.task.stop_reason) == (True, "runaway")
    assert (again.newly_set, again.task.stop_reason) == (False, "runaway")
    [stop] = store.transitions("t")
    assert (stop.kind, stop.who, stop.why, stop.at, stop.from_outcome) == ("stop", "ana", "runaway", 5.0, None)
    assert store.request_stop("t", "third").stop_reason == "runaway"  # the old entry point: same mark, no record
    assert len(store.transitions("t")) == 1


def test_a_stop_after_the_outcome_records_what_it_stopped(store_factory: Callable[[], Store]) -> None:
    store = store_factory()
    Guard(budget=Budget(3, 3), store=store, task_id="t").finish(Status.STOPPED, Reason.SAME_CALL)
    store.set_stop_mark("t", "audit", who="ana")
    [stop] = store.transitions("t")
    assert stop.from_outcome is not None and stop.from_outcome["reason"] == "same_call"
    anonymous = store_factory()
    Guard(budget=Budget(3, 3), store=anonymous, task_id="u")
    assert anonymous.set_stop_mark("u", "from code").newly_set and anonymous.transitions("u") == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_racing_processes_set_the_mark_once(sql_url: str, tmp_path: Path) -> None:
    """Rules: R3 (shared stop mark), R16 (many workers)."""
    from agents_loopguard.store.sql import SQLStore

    store = SQLStore(sql_url)
    Guard(budget=Budget(3, 3), store=store, task_id="t")
    racers = [f"op-{n}" for n in range(6)]
    procs = [
        forked.ForkedPopen(
            [sys.executable, "-c", RACER, sql_url, who, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for who in racers
    ]
    give_up = time.monotonic() + 60
    while len(list(tmp_path.glob("ready-*"))) < len(racers):
        assert time.monotonic() < give_up and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    (tmp_path / "go").touch()
    answers = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    winners = [a["who"] for a in answers if a["newly_set"]]
    assert len(winners) == 1, answers
    assert {a["reason"] for a in answers} == {f"stopped by {winners[0]}"}
    [stop] = store.transitions("t")
    assert stop.who == winners[0]
    store.close()


# --- stop hooks -----------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/support-agent-AbCdEf1234"


def agentcore() -> tuple[Any, Any]:
    """The example's hook on a real botocore client whose calls go to a Stubber (no AWS)."""
    import boto3
    from botocore.stub import Stubber

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from agentcore_stop_hook import AgentCoreStopHook
    finally:
        sys.path.remove(str(ROOT / "examples"))
    client = boto3.client(
        "bedrock-agentcore", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    return AgentCoreStopHook(ARN, client=client), Stubber(client)


def test_python_hooks_by_task_and_global_once_each_and_failures_reported(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    for task in ("t1", "t2"):
        Guard(budget=Budget(3, 3), store=store, task_id=task)
    calls: list[tuple[str, str]] = []
    removers = [
        register_stop_hook(lambda e: calls.append(("t1-only", e.task_id)), task_id="t1"),
        register_stop_hook(lambda e: calls.append(("global", e.task_id))),
        register_stop_hook(explode, task_id="t2"),
    ]
    try:
        one = request_stop(store, "t1", reason="runaway", who="ana")
        two = request_stop(store, "t2", reason="runaway", who="ana")
        again = request_stop(store, "t1", reason="again", who="bob")
    finally:
        for remove in removers:
            remove()
    assert calls == [("t1-only", "t1"), ("global", "t1"), ("global", "t2")]
    assert [r.ok for r in one.hooks] == [True, True] and again.hooks == () and again.newly_set is False
    failed = [r for r in two.hooks if not r.ok]
    assert len(failed) == 1 and failed[0].hook.endswith(":explode") and "pager is down" in (failed[0].error or "")
    assert "abc123secret" not in (failed[0].error or "") and two.task.stop_reason == "runaway"  # the stop holds
    assert any("stop hook" in r.getMessage() and "explode" in r.getMessage() for r in caplog.records)


def test_an_api_stop_ends_the_agentcore_session_once(tmp_path: Path) -> None:
    import httpx

    from agents_loopguard.server import create_app
    from agents_loopguard.store.sql import SQLStore
    from tests.support.live_server import LiveServer
    from tests.support.server_env import CONFIG, bearer

    hook, stubber = agentcore()
    request = hook.request("ticket-981")
    assert len(request["runtimeSessionId"]) >= 33 and request["agentRuntimeArn"] == ARN
    stubber.add_response("stop_runtime_session", {"runtimeSessionId": "s", "statusCode": 200}, request)
    stubber.activate()
    store = SQLStore(f"sqlite:///{tmp_path / 'hooks.db'}")
    Guard(budget=Budget(6, 4), store=store, task_id="ticket-981")
    remove = register_stop_hook(hook, task_id="ticket-981")
    try:
        with LiveServer(create_app(store, CONFIG)) as server, httpx.Client(base_url=server.url, timeout=30) as http:
            first = http.post("/api/v1/tasks/ticket-981/stop", headers=bearer("ana"), json={"reason": "runaway"}).json()
            second = http.post("/api/v1/tasks/ticket-981/stop", headers=bearer("bob"), json={"reason": "x"}).json()
    finally:
        remove()
        store.close()
    assert first["set_now"] is True and first["hooks"] == [
        {"hook": first["hooks"][0]["hook"], "ok": True, "error": None}
    ]
    assert second["set_now"] is False and second["hooks"] == []
    stubber.assert_no_pending_responses()  # StopRuntimeSession was called exactly once, with exactly that request


def test_a_session_already_gone_is_not_a_failure() -> None:
    hook, stubber = agentcore()
    stubber.add_client_error("stop_runtime_session", "ResourceNotFoundException", "no session", 404)
    stubber.activate()
    store = MemoryStore()
    Guard(budget=Budget(3, 3), store=store, task_id="ticket-7")
    remove = register_stop_hook(hook, task_id="ticket-7")
    try:
        done = request_stop(store, "ticket-7", reason="stop", who="ana")
    finally:
        remove()
    assert [r.ok for r in done.hooks] == [True]
    stubber.assert_no_pending_responses()


def cli_stop(db: str, who: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agents_loopguard.cli", "--db", db, "--json", "stop", "t", "--who", who]
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), env.pop("PYTHONPATH", "")]), **env}
    return forked.run(command, capture_output=True, text=True, timeout=120, env=full)


@pytest.mark.slow
def test_the_cli_runs_hooks_from_the_environment_once(tmp_path: Path) -> None:
    from agents_loopguard.store.sql import SQLStore

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    store = SQLStore(db)
    Guard(budget=Budget(3, 3), store=store, task_id="t")
    probe = tmp_path / "probe.jsonl"
    hooks = "tests.support.stop_probe:record, no.such.module:hook, tests.support.stop_probe:explode"
    first = cli_stop(db, "ana", LOOPGUARD_STOP_HOOKS=hooks, STOP_PROBE_FILE=str(probe))
    second = cli_stop(db, "bob", LOOPGUARD_STOP_HOOKS=hooks, STOP_PROBE_FILE=str(probe))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    [line] = [json.loads(x) for x in probe.read_text().splitlines()]
    assert (line["task_id"], line["who"], line["reason"]) == ("t", "ana", "operator")
    ran = json.loads(first.stdout)["hooks"]
    assert [(h["hook"], h["ok"]) for h in ran] == [
        ("tests.support.stop_probe:record", True),
        ("no.such.module:hook", False),
        ("tests.support.stop_probe:explode", False),
    ]
    assert "cannot load it: ModuleNotFoundError" in ran[1]["error"] and json.loads(second.stdout)["hooks"] == []
    assert [(t.kind, t.who) for t in store.transitions("t")] == [("stop", "ana")]
    store.close()


@pytest.mark.slow
def test_an_installed_package_adds_hooks_through_its_entry_point(tmp_path: Path) -> None:
    from agents_loopguard.store.sql import SQLStore

    site = tmp_path / "site"
    info = site / "probe_hooks-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-hooks\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[agents_loopguard.stop_hooks]\nprobe = tests.support.stop_probe:record\n")
    db = f"sqlite:///{tmp_path / 'ep.db'}"
    store = SQLStore(db)
    Guard(budget=Budget(3, 3), store=store, task_id="t")
    probe = tmp_path / "probe.jsonl"
    done = cli_stop(db, "ana", PYTHONPATH=str(site), STOP_PROBE_FILE=str(probe))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hooks"] == [
        {"hook": "probe (tests.support.stop_probe:record)", "ok": True, "error": None}
    ]
    assert len(probe.read_text().splitlines()) == 1
    store.close()
