"""The `loopguard` command as an operator uses it: real subprocesses on a real database (SQLite file, PostgreSQL)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, Guard, Reason, RecoveryRecord, Status
from agents_loopguard.approvals import pause_digest
from agents_loopguard.store.sql import SQLStore

HERE = Path(__file__).parent
_SCRIPT = Path(sys.executable).with_name("loopguard")
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "agents_loopguard.cli"]


def loopguard(*args: str, url: str | None = None, check: bool = True, env: dict[str, str] | None = None) -> Any:
    argv = [*COMMAND, *(["--db", url] if url else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"{argv} exited {done.returncode}: {done.stderr}")
    return done


def as_json(*args: str, url: str) -> Any:
    return json.loads(loopguard("--json", *args, url=url).stdout)


@pytest.mark.timeout(180)
def test_demo_then_find_inspect_export_and_reconcile_the_task(sql_url: str) -> None:
    demo = loopguard("demo", url=sql_url)
    assert "stopped / no_progress" in demo.stdout and "needs_reconciliation / unknown_commit" in demo.stdout
    tasks = {t["task_id"]: t for t in as_json("tasks", url=sql_url)}
    assert len(tasks) == 3
    pay = next(t for t in tasks if t.startswith("demo-payment-") and "retry" not in t)
    assert tasks[pay]["status"] == "needs_reconciliation" and tasks[pay]["tools"] == "1/4"

    shown = loopguard("show", pay, url=sql_url).stdout
    assert "tool executions  1 of 4" in shown and "exception:TimeoutError" in shown
    assert "allowed next actions: query_operation_status, human_review" in shown
    detail = as_json("show", pay, url=sql_url)
    (operation,) = detail["operations"]
    assert operation["state"] == "unknown"
    # the model turn reserved, its answer (both adapters trace every attempt's result), then the lost payment
    assert [(e["kind"], e["result_class"]) for e in detail["timeline"]][:2] == [
        ("model", "reserved"),
        ("model", "answered"),
    ]
    assert [e["kind"] for e in detail["timeline"]] == ["model", "model", "tool"]

    record = RecoveryRecord.from_json(loopguard("record", pay, url=sql_url).stdout)
    assert (record.status, record.reason) == (Status.NEEDS_RECONCILIATION, Reason.EXECUTOR_EXCEPTION)
    assert record.operation_id == operation["operation_id"]

    answer = as_json(
        "reconcile",
        operation["operation_id"],
        "committed",
        "--who",
        "ops",
        "--why",
        "receiver: paid",
        "--result",
        '{"status": "ok", "receipt": "r-77"}',
        url=sql_url,
    )
    assert answer["state"] == "committed" and answer["task_reopened"] is True
    after = as_json("show", pay, url=sql_url)
    assert after["operations"][0]["state"] == "committed" and after["operations"][0]["result"]["receipt"] == "r-77"
    assert after["transitions"][0]["kind"] == "reconcile" and after["transitions"][0]["who"] == "ops"
    assert after["task"]["used"] == {"models": 1, "tools": 1, "cost": 0.0}, "reconciling never resets counters"


@pytest.mark.timeout(120)
def test_stop_from_the_cli_while_a_guarded_run_is_in_progress(sql_url: str, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    worker = subprocess.Popen(
        [sys.executable, str(HERE / "workers" / "cli_long_run.py"), sql_url, "t-long", str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(600):
            if ready.exists() or worker.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), f"the worker never got going: {worker.stderr.read() if worker.stderr else ''}"
        loopguard("stop", "t-long", "--reason", "runaway batch job", url=sql_url)
        at_stop = as_json("show", "t-long", url=sql_url)["task"]["used"]["tools"]
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["record"]["status"], result["record"]["reason"]) == ("stopped", "stop_requested")
    final = as_json("show", "t-long", url=sql_url)
    assert final["task"]["used"]["tools"] == at_stop, "no execution was reserved after the stop mark committed"
    assert result["bodies_run"] == at_stop, "every body that ran had been reserved before the stop"
    assert final["task"]["stop_mark"] == "runaway batch job"
    assert at_stop < 2000


def _paused_task(url: str) -> str:
    store = SQLStore(url)
    Guard(budget=Budget(model_turns=6, tool_executions=4), store=store, task_id="t-pause").begin_turn()
    calls = [
        {"call_id": "c1", "tool": "pay", "arguments": '{"amount":5}', "operation_id": "inv-1"},
        {"call_id": "c2", "tool": "pay", "arguments": '{"amount":9}', "operation_id": "inv-2"},
    ]
    store.save_pause(
        "t-pause",
        "p-1",
        '{"run": "state"}',
        calls,
        digest=pause_digest("t-pause", '{"run": "state"}', calls),
        outcome=Guard(budget=Budget(6, 4), store=store, task_id="t-pause")
        .finish(Status.NEEDS_HUMAN, Reason.APPROVAL)
        .record()
        .to_dict(),
    )
    store.close()
    return "p-1"


@pytest.mark.timeout(120)
def test_decide_a_pause_from_the_cli_once(sql_url: str) -> None:
    pause = _paused_task(sql_url)
    shown = as_json("pause", pause, url=sql_url)
    assert shown["digest_ok"] is True and shown["status"] == "pending" and shown["used"]["models"] == 1
    wrong = loopguard("approve", pause, "--who", "ana", "--call", "c1", "--call", "c9", url=sql_url, check=False)
    assert wrong.returncode == 2 and "no pending call 'c9'" in wrong.stderr  # bad input, not a state refusal
    partial = loopguard("approve", pause, "--who", "ana", "--call", "c1", url=sql_url, check=False)
    assert partial.returncode == 2 and "undecided calls: c2" in partial.stderr  # incomplete input
    decided = as_json("approve", pause, "--who", "ana", "--call", "c1", "--reject", "c2", url=sql_url)
    assert decided["decisions"] == {"c1": "approve", "c2": "reject"} and decided["decided_by"] == "ana"
    again = loopguard("reject", pause, "--who", "bob", url=sql_url, check=False)
    assert again.returncode == 1 and "final" in again.stderr
    assert as_json("pause", pause, url=sql_url)["decisions"] == {"c1": "approve", "c2": "reject"}


def test_a_tampered_pause_is_shown_and_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    pause = _paused_task(url)
    with sqlite3.connect(tmp_path / "lg.db") as db:
        db.execute("UPDATE loopguard_pauses SET pending_calls = replace(pending_calls, '5', '500')")
    assert "DIGEST MISMATCH" in loopguard("pause", pause, url=url).stdout
    refused = loopguard("approve", pause, "--who", "ana", url=url, check=False)
    assert refused.returncode == 1 and "does not match its digest" in refused.stderr


def test_recover_from_the_cli_extends_limits_and_keeps_counters(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    store = SQLStore(url)
    guard = Guard(budget=Budget(model_turns=2, tool_executions=2), store=store, task_id="t-r")
    guard.begin_turn()
    guard.begin_turn()
    guard.end(guard.begin_turn())  # type: ignore[arg-type]
    store.close()
    refused = loopguard("recover", "t-r", "--who", "lead", "--why", "", url=url, check=False)
    assert refused.returncode == 2 and "who decides and why" in refused.stderr  # a missing --why is bad input
    out = loopguard("recover", "t-r", "--who", "lead", "--why", "productive; 3 more", "--more-turns", "3", url=url)
    assert "limits now 5 turns" in out.stdout and "used so far 2" in out.stdout
    task = as_json("show", "t-r", url=url)
    assert task["task"]["status"] == "running" and task["task"]["used"]["models"] == 2
    assert task["transitions"][0]["budget_delta"] == {"model_turns": 3}


def test_clear_messages_for_wrong_ids_urls_and_schemas(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    SQLStore(url).close()
    missing = loopguard("show", "nope", url=url, check=False)
    assert missing.returncode == 2 and "no task 'nope'" in missing.stderr and "loopguard tasks" in missing.stderr
    assert loopguard("reconcile", "nope", "committed", "--who", "x", url=url, check=False).returncode == 2
    assert loopguard("pause", "nope", url=url, check=False).returncode == 2
    bad_scheme = loopguard("tasks", url="nosuchdb://x", check=False)
    assert bad_scheme.returncode == 2 and "unsupported database" in bad_scheme.stderr
    unreachable = loopguard("tasks", url="postgresql+psycopg://nobody@127.0.0.1:1/none", check=False)
    assert unreachable.returncode == 2 and "loopguard:" in unreachable.stderr
    with sqlite3.connect(tmp_path / "lg.db") as db:
        db.execute("UPDATE loopguard_meta SET value = '999' WHERE key = 'schema_version'")
    old = loopguard("tasks", url=url, check=False)
    assert old.returncode == 2 and "version" in old.stderr and "Traceback" not in old.stderr
    assert "no tasks" in loopguard("tasks", url=f"sqlite:///{tmp_path / 'empty.db'}").stdout


def test_url_from_the_environment(tmp_path: Path) -> None:
    import os

    url = f"sqlite:///{tmp_path / 'env.db'}"
    store = SQLStore(url)
    Guard(budget=Budget(model_turns=1, tool_executions=1), store=store, task_id="t-env")
    store.close()
    env = {**os.environ, "LOOPGUARD_DATABASE_URL": url}
    assert "t-env" in loopguard("tasks", env=env).stdout
