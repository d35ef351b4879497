"""Approval pauses across OS processes, on a SQLite file and on PostgreSQL.

The test process pauses the run (it is the application's first worker); a fresh process (``tests/workers/
pause_worker.py``) that knows only the application's agent code (``tests/workers/pause_app.py``) resumes it. The
counts asserted come from the store and from the refund receiver's journal, never from timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, Reason, Status, Usage
from agents_loopguard.approvals import decide
from agents_loopguard.sdk import run_guarded_sync
from agents_loopguard.store import SQLStore

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))

import pause_app  # noqa: E402  (the application's agent code, shared with the worker processes)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The refund receiver's journal, shared by this process and the workers (one line per execution)."""
    path = tmp_path / "refunds.log"
    monkeypatch.setenv(pause_app.SENT_ENV, str(path))
    return path


@pytest.fixture
def db(sql_url: str) -> Any:
    opened = SQLStore(sql_url)
    yield opened
    opened.close()


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKERS / "pause_worker.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )


def answer(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=90)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, f"worker failed (exit {proc.returncode}):\n{out}\n{err}"
    return dict(json.loads(lines[-1]))


def open_barrier(barrier: Path, workers: list[subprocess.Popen[str]], names: list[str]) -> None:
    """Wait until every worker is ready (imports done, store open, agent built), then let them go together."""
    give_up = time.monotonic() + 90
    while not all((barrier / f"ready-{name}").exists() for name in names):
        for proc in workers:
            if proc.poll() is not None:
                pytest.fail(f"a worker exited before the barrier: {proc.communicate()}")
        assert time.monotonic() < give_up, "workers never reached the barrier"
        time.sleep(0.005)
    (barrier / "go").touch()


def pause_in_this_process(store: SQLStore, scenario: str, task_id: str) -> Any:
    agent = pause_app.build_agent(scenario, "before")
    return run_guarded_sync(
        agent,
        "please help",
        budget=pause_app.BUDGETS[scenario],
        store=store,
        task_id=task_id,
        policy=pause_app.policy(scenario),
    )


def test_a_resume_in_a_fresh_process_continues_the_counters(db: SQLStore, sql_url: str, journal: Path) -> None:
    paused = pause_in_this_process(db, "continue", "t-continue")
    assert (paused.status, paused.reason, paused.used) == (Status.NEEDS_HUMAN, Reason.APPROVAL, Usage(4, 3))
    pause = db.pause(paused.pause_id or "")
    assert pause is not None and pause.status == "pending" and pause.task_id == "t-continue"
    assert (pause.budget, pause.used) == (Budget(model_turns=6, tool_executions=10), Usage(4, 3))
    [call] = pause.pending_calls
    assert (call["tool"], call["kind"], call["arguments"], call["operation_id"]) == (
        "refund",
        "write",
        '{"order":5}',
        "refund-order-5",
    )
    decide(db, pause.pause_id, who="ana", approve_all=True, why="customer verified")

    resumed = answer(start("resume", sql_url, pause.pause_id, "continue", "worker-b"))

    # 6 model turns allowed, 4 used before the pause: exactly 2 after it, then the budget says stop
    assert (resumed["outcome"]["status"], resumed["outcome"]["reason"]) == ("stopped", "model_budget")
    task = db.task("t-continue")
    assert task is not None and (task.used.models, task.used.tools) == (6, 6)
    assert task.used.models - pause.used.models == 2
    assert resumed["outcome"]["used"] == {"models": 6, "tools": 6, "cost": 0.0}
    assert pause_app.executions(journal) == [f"refund-order-5 pid={resumed['pid']}"]  # ran once, in the worker
    [resume] = db.transitions("t-continue")
    assert (resume.kind, resume.who, resume.pause_id, resume.decisions) == (
        "resume",
        "worker-b",
        pause.pause_id,
        {call["call_id"]: "approve"},
    )
    assert resume.from_outcome is not None and resume.from_outcome["reason"] == "approval"
    assert db.pause(pause.pause_id).status == "resumed"  # type: ignore[union-attr]


def test_approving_the_same_write_forever_stops_at_the_task_budget(db: SQLStore, sql_url: str, journal: Path) -> None:
    # LangChain's run limit and ADK's max_llm_calls restart from zero after each approval: 8 approvals there are 8
    # refunds against a limit of 3. Here the ledger sends the refund once, and the task's budget ends the loop.
    paused = pause_in_this_process(db, "forever", "t-forever")
    assert paused.status is Status.NEEDS_HUMAN

    looped = answer(start("approve-loop", sql_url, paused.pause_id or "", "forever", "worker-b", "50"))

    outcome = looped["outcome"]
    assert (outcome["status"], outcome["reason"]) == ("stopped", "model_budget")
    assert looped["approvals"] == 8  # every pause was approved; the ninth model turn was refused
    assert len(pause_app.executions(journal)) == 1  # the write executed once; later approvals returned its result
    task = db.task("t-forever")
    assert task is not None and task.used == Usage(models=8, tools=1)
    assert task.used.models <= task.budget.model_turns and task.used.tools <= task.budget.tool_executions
    pauses = db.pauses("t-forever")
    assert [p.used.models for p in pauses] == list(range(1, 9))  # each pause stored the counters, never fresh
    assert {p.status for p in pauses} == {"resumed"}
    [operation] = db.operations("t-forever")
    assert (operation.operation_id, str(operation.state), operation.attempts) == ("refund-order-5", "committed", 1)
    assert [t.kind for t in db.transitions("t-forever")] == ["resume"] * 8


def test_two_processes_resuming_one_pause_at_once_one_wins(
    db: SQLStore, sql_url: str, journal: Path, tmp_path: Path
) -> None:
    paused = pause_in_this_process(db, "once", "t-race")
    decide(db, paused.pause_id or "", who="ana", approve_all=True)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    names = ["worker-a", "worker-b"]
    workers = [start("resume", sql_url, paused.pause_id or "", "once", n, "--barrier", str(barrier)) for n in names]
    open_barrier(barrier, workers, names)
    answers = [answer(proc) for proc in workers]

    winners = [a for a in answers if "outcome" in a]
    losers = [a for a in answers if "error" in a]
    assert len(winners) == 1 and len(losers) == 1, answers
    assert losers[0]["error"] == "PauseAlreadyResumed"
    assert "resumes at most once" in losers[0]["message"]
    assert winners[0]["outcome"]["used"]["tools"] == 1
    assert pause_app.executions(journal) == [f"refund-order-7 pid={winners[0]['pid']}"]
    [resume] = db.transitions("t-race")
    assert resume.who in names and db.pause(paused.pause_id or "").resumed_by == resume.who  # type: ignore[union-attr]


def test_two_operators_deciding_one_pause_at_once_one_wins(
    db: SQLStore, sql_url: str, journal: Path, tmp_path: Path
) -> None:
    paused = pause_in_this_process(db, "once", "t-decide")
    pause_id = paused.pause_id or ""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    names = ["ana", "bo"]
    workers = [
        start("decide", sql_url, pause_id, "ana", "approve", "--barrier", str(barrier)),
        start("decide", sql_url, pause_id, "bo", "reject", "--barrier", str(barrier), "--cli"),  # `loopguard reject`
    ]
    open_barrier(barrier, workers, names)
    ana, bo = (answer(proc) for proc in workers)

    ana_won, bo_won = "decided" in ana, bo.get("cli_exit") == 0
    assert ana_won != bo_won, (ana, bo)  # exactly one decision is recorded; the database serialized them
    if ana_won:
        assert bo["cli_exit"] == 1  # refused by the pause's state
    else:
        assert ana["error"] == "PauseAlreadyResumed" and "decisions are final" in ana["message"]
    pause = db.pause(pause_id)
    assert pause is not None and pause.status == "decided" and pause.decided_by == ("ana" if ana_won else "bo")
    assert set(pause.decisions.values()) == {"approve" if ana_won else "reject"}

    # the resume applies exactly the decision that won
    from agents_loopguard.sdk import resume_guarded_sync

    resumed = resume_guarded_sync(pause_app.build_agent("once", "after"), pause_id, store=db, who="worker")
    assert len(pause_app.executions(journal)) == (1 if ana_won else 0)
    assert resumed.used.tools == (1 if ana_won else 0)
