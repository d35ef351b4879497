"""Approval pauses across OS processes, on a SQLite file and on PostgreSQL.

The test process pauses the run (it is the application's first worker); other OS processes resume or decide it:
two worker processes (``tests/workers/pause_worker.py serve``, started once for this module so that the tests stay
fast) that know only the application's agent code (``tests/workers/pause_app.py``) and hold nothing of a task but
what they read from the store: every job opens its own store handle and builds a fresh agent. The example test
spawns a brand-new process for its resume. Counts come from the store and the refund receiver's journal, never
from timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from agents_loopguard import Budget, Reason, Status, Usage
from agents_loopguard.ops.approvals import decide
from agents_loopguard.sdk import resume_guarded_sync, run_guarded_sync
from agents_loopguard.store import SQLStore
from tests.support import forked
from tests.support.stores import sql_store

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))

import pause_app  # noqa: E402  (the application's agent code, shared with the worker processes)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class Worker:
    """One ``pause_worker.py serve`` process: send it a job, read its answer."""

    def __init__(self, log: IO[str]) -> None:
        self.proc = forked.ForkedPopen(
            [sys.executable, str(WORKERS / "pause_worker.py"), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        self.pid = self.receive()["pid"]

    def send(self, command: str, **job: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"command": command, **job}) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"worker exited (code {self.proc.poll()}); see its log"
        return dict(json.loads(line))

    def ask(self, command: str, **job: Any) -> dict[str, Any]:
        self.send(command, **job)
        return self.receive()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Worker]]:
    log_path = tmp_path_factory.mktemp("workers") / "stderr.log"
    with log_path.open("w") as log:
        started = [Worker(log), Worker(log)]
        try:
            yield started
        finally:
            for worker in started:
                worker.close()


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The refund receiver's journal, shared by this process and the workers (one line per execution)."""
    path = tmp_path / "refunds.log"
    monkeypatch.setenv(pause_app.SENT_ENV, str(path))
    return path


db = pytest.fixture(sql_store, name="db")


def open_barrier(barrier: Path, names: list[str]) -> None:
    """Wait until every worker is ready (store open, agent built), then let them go together."""
    give_up = time.monotonic() + 60
    while not all((barrier / f"ready-{name}").exists() for name in names):
        assert time.monotonic() < give_up, "workers never reached the barrier"
        time.sleep(0.002)
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


def test_a_resume_in_another_process_continues_the_counters(
    db: SQLStore, sql_url: str, journal: Path, workers: list[Worker]
) -> None:
    """Rules: R13 (approval pauses), R16 (many workers)."""
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

    resumed = workers[1].ask(
        "resume", url=sql_url, pause_id=pause.pause_id, scenario="continue", who="worker-b", journal=str(journal)
    )

    # 6 model turns allowed, 4 used before the pause: exactly 2 after it, then the budget says stop
    assert (resumed["outcome"]["status"], resumed["outcome"]["reason"]) == ("stopped", "model_budget")
    task = db.task("t-continue")
    assert task is not None and (task.used.models, task.used.tools) == (6, 6)
    assert task.used.models - pause.used.models == 2
    assert resumed["outcome"]["used"] == {"models": 6, "tools": 6, "cost": 0.0}
    assert resumed["pid"] != os.getpid()
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


def test_approving_the_same_write_forever_stops_at_the_task_budget(
    db: SQLStore, sql_url: str, journal: Path, workers: list[Worker]
) -> None:
    # LangChain's run limit and ADK's max_llm_calls restart from zero after each approval: 8 approvals there are 8
    # refunds against a limit of 3. Here the ledger sends the refund once, and the task's budget ends the loop.
    paused = pause_in_this_process(db, "forever", "t-forever")
    assert paused.status is Status.NEEDS_HUMAN

    looped = workers[1].ask(
        "approve-loop",
        url=sql_url,
        pause_id=paused.pause_id,
        scenario="forever",
        who="worker-b",
        max_approvals=50,
        journal=str(journal),
    )

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
    db: SQLStore, sql_url: str, journal: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    """Rules: R13 (approval pauses), R16 (many workers)."""
    paused = pause_in_this_process(db, "once", "t-race")
    decide(db, paused.pause_id or "", who="ana", approve_all=True)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    names = ["worker-a", "worker-b"]
    for worker, name in zip(workers, names, strict=True):
        worker.send(
            "resume",
            url=sql_url,
            pause_id=paused.pause_id,
            scenario="once",
            who=name,
            barrier=str(barrier),
            journal=str(journal),
        )
    open_barrier(barrier, names)
    answers = [worker.receive() for worker in workers]

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
    db: SQLStore, sql_url: str, journal: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    paused = pause_in_this_process(db, "once", "t-decide")
    pause_id = paused.pause_id or ""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    race = {"url": sql_url, "pause_id": pause_id, "barrier": str(barrier)}
    workers[0].send("decide", who="ana", verb="approve", **race)  # approvals.decide
    workers[1].send("decide", who="bo", verb="reject", cli=True, **race)  # `loopguard --db URL reject PAUSE --who bo`
    open_barrier(barrier, ["ana", "bo"])
    ana, bo = (worker.receive() for worker in workers)

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
    resumed = resume_guarded_sync(pause_app.build_agent("once", "after"), pause_id, store=db, who="worker")
    assert len(pause_app.executions(journal)) == (1 if ana_won else 0)
    assert resumed.used.tools == (1 if ana_won else 0)


@pytest.mark.timeout(120)
def test_the_approval_resume_example_runs_as_documented() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    example = Path(__file__).resolve().parents[1] / "examples" / "approval_resume.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=100, cwd="/", env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "needs_human/approval; model turns 2/6, tool executions 1/4" in out
    assert 'waits for approval: refund {"amount":30,"order":42} (operation refund-order-42)' in out
    assert "call-refund approved" in out  # printed by the `loopguard approve` subprocess
    assert "completed/validated_done; model turns 3/6, tool executions 2/4" in out  # continued, not fresh
    paused_pid = out.split("1. paused in process ", 1)[1].split(":", 1)[0]
    resumed_pid = out.split("3. resumed in process ", 1)[1].split(":", 1)[0]
    assert paused_pid != resumed_pid
