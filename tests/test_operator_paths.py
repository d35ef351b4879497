"""The operator's path after a worker is killed during an approved resume, end to end with real OS processes
(issue 21, point 5): the write reached the receiver, its answer never came back, the task is left ``running`` with
the write ``unknown``. ``show`` names the real path (stop, reconcile, recover), each step is refused until the one
before it is done, and the recovered task continues its counters without sending the write again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agents.testing import ScriptedModel, assistant_message

from agents_loopguard import Status
from agents_loopguard.ops.approvals import decide
from agents_loopguard.sdk import resume_guarded_sync, run_guarded_sync
from agents_loopguard.store import SQLStore
from tests.support.cli import in_process
from tests.support.stores import sql_store

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ROOT / "tests" / "workers"
sys.path.insert(0, str(WORKERS))

import pause_app  # noqa: E402  (the application's agent code, shared with the worker process)

pytestmark = pytest.mark.timeout(180)
db = pytest.fixture(sql_store, name="db")


def loopguard(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The operator's command (in this process: the killed worker is the process that matters here)."""
    return in_process(["--db", url, *args])


def shown(url: str, task_id: str) -> dict[str, Any]:
    done = loopguard(url, "--json", "show", task_id)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def kill_during_the_resume(url: str, pause_id: str, tmp_path: Path, journal: Path) -> int:
    """A worker process resumes the approved pause; the refund reaches the receiver, then the worker is killed."""
    hang = tmp_path / "refund-sent"
    job = {"command": "resume", "url": url, "pause_id": pause_id, "scenario": "once", "who": "worker-b"}
    env = {**os.environ, "PYTHONPATH": str(ROOT), pause_app.SENT_ENV: str(journal), pause_app.HANG_ENV: str(hang)}
    proc = subprocess.Popen([sys.executable, str(WORKERS / "pause_worker.py"), json.dumps(job)], env=env)
    give_up = time.monotonic() + 90
    while not hang.exists():
        assert proc.poll() is None, "the worker ended before the refund ran"
        assert time.monotonic() < give_up, "the refund never ran"
        time.sleep(0.01)
    proc.kill()
    assert proc.wait(timeout=30) == -9
    return proc.pid


def test_after_a_kill_during_an_approved_resume_show_names_the_path_and_it_works(
    db: SQLStore, sql_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "refunds.log"
    monkeypatch.setenv(pause_app.SENT_ENV, str(journal))
    paused = run_guarded_sync(
        pause_app.build_agent("once", "before"),
        "please help",
        budget=pause_app.BUDGETS["once"],
        store=db,
        task_id="t-kill",
    )
    assert paused.status is Status.NEEDS_HUMAN and paused.pause_id
    decide(db, paused.pause_id, who="ana", approve_all=True, why="customer verified")
    pid = kill_during_the_resume(sql_url, paused.pause_id, tmp_path, journal)
    assert pause_app.executions(journal) == [f"refund-order-7 pid={pid}"]

    view = shown(sql_url, "t-kill")
    assert view["task"]["status"] == "running" and view["task"]["outcome"] is None
    assert [(o["operation_id"], o["state"]) for o in view["operations"]] == [("refund-order-7", "unknown")]
    assert view["allowed_next_actions"] == ["stop", "query_operation_status"]
    steps = " ".join(view["next_steps"])
    assert "loopguard stop t-kill" in steps and "loopguard reconcile refund-order-7" in steps
    assert "loopguard recover t-kill" in steps
    human = loopguard(sql_url, "show", "t-kill").stdout
    assert "loopguard reconcile refund-order-7" in human

    refused = loopguard(sql_url, "recover", "t-kill", "--who", "lead", "--why", "retry")
    assert refused.returncode == 1 and "running" in refused.stderr
    assert loopguard(sql_url, "stop", "t-kill", "--reason", "worker killed", "--who", "ops").returncode == 0
    assert shown(sql_url, "t-kill")["allowed_next_actions"] == ["query_operation_status"]
    refused = loopguard(sql_url, "recover", "t-kill", "--who", "lead", "--why", "retry")
    assert refused.returncode == 1 and "refund-order-7" in refused.stderr and "unknown" in refused.stderr

    answered = loopguard(sql_url, "reconcile", "refund-order-7", "committed", "--who", "ops", "--why", "bank: done")
    assert answered.returncode == 0, answered.stderr
    assert shown(sql_url, "t-kill")["allowed_next_actions"] == ["recover"]
    reopened = loopguard(sql_url, "recover", "t-kill", "--who", "lead", "--why", "refund confirmed by the bank")
    assert reopened.returncode == 0, reopened.stderr

    agent = pause_app.build_agent("once", "after").clone(model=ScriptedModel([[assistant_message("order 7 refunded")]]))
    rerun = run_guarded_sync(agent, "please help", budget=pause_app.BUDGETS["once"], store=db, task_id="t-kill")
    assert rerun.status is not Status.NEEDS_RECONCILIATION, rerun.detail
    assert rerun.final_output == "order 7 refunded"
    assert pause_app.executions(journal) == [f"refund-order-7 pid={pid}"]  # never sent again
    assert rerun.used.models > paused.used.models  # the counters continued
    kinds = [t.kind for t in db.transitions("t-kill")]
    assert kinds[-1] == "recover" and "resume" in kinds


def test_resume_guarded_defaults_to_the_store_run_guarded_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules: R13 (approval pauses)."""
    monkeypatch.setenv(pause_app.SENT_ENV, str(tmp_path / "refunds.log"))
    monkeypatch.setenv("LOOPGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'default.db'}")
    paused = run_guarded_sync(
        pause_app.build_agent("once", "before"), "please help", budget=pause_app.BUDGETS["once"], task_id="t-default"
    )
    assert paused.status is Status.NEEDS_HUMAN and paused.pause_id
    resumed = resume_guarded_sync(
        pause_app.build_agent("once", "after"),
        paused.pause_id,
        who="ana",
        decisions={str(c["call_id"]): "approve" for c in _pending(tmp_path, paused.pause_id)},
    )
    assert resumed.final_output == "order 7 refunded" and resumed.used.models == paused.used.models + 1
    assert pause_app.executions(tmp_path / "refunds.log") != []
    with SQLStore(f"sqlite:///{tmp_path / 'default.db'}", readonly=True) as store:
        assert [t.kind for t in store.transitions("t-default")] == ["resume"]


def _pending(tmp_path: Path, pause_id: str) -> list[dict[str, Any]]:
    with SQLStore(f"sqlite:///{tmp_path / 'default.db'}", readonly=True) as store:
        pause = store.pause(pause_id)
        assert pause is not None
        return list(pause.pending_calls)
