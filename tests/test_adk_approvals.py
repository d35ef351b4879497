"""Approvals through ADK's own tool confirmation (``require_confirmation``, ``ToolConfirmation``), across OS
processes, on a SQLite file and on PostgreSQL: the pause is stored with the budget, the answer resumes it once with
the counters continuing, a second delivery of the same answer runs nothing twice and never rewinds the budget, and
a run whose proposals a human keeps rejecting ends (issue 19)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard.store import SQLStore

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parent.parent


def worker(tmp: Path, sql_url: str, step: str, **cfg: Any) -> dict[str, Any]:
    """Run one step in a fresh OS process and read the JSON it prints."""
    job = {
        "step": step,
        "store": sql_url,
        "sessions": str(tmp / "sessions.db"),
        "journal": str(tmp / "journal.txt"),
        "session": "s-1",
        **cfg,
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.workers.adk_confirm_worker", json.dumps(job)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def in_process(tmp: Path, sql_url: str, step: str, **cfg: Any) -> dict[str, Any]:
    """The same step in this process (where crossing processes is not the point)."""
    from tests.workers.adk_confirm_worker import main

    job = {"step": step, "store": sql_url, "sessions": str(tmp / "sessions.db"), "journal": str(tmp / "journal.txt")}
    return asyncio.run(main({**job, "session": "s-1", **cfg}))


def refunds(tmp: Path) -> list[str]:
    journal = tmp / "journal.txt"
    return journal.read_text().splitlines() if journal.exists() else []


def test_a_confirmation_resumes_the_stored_pause_once_in_another_process(tmp_path: Path, sql_url: str) -> None:
    """R13: the first process stops at the confirmation (``needs_human/approval``, the pause stored with the
    budget, nothing executed); a second process answers it: the same task continues (counters from 1 model
    call, not 0), the refund runs once and completes the task; a third process delivering the same answer again
    (ADK resumes at least once) is refused before anything runs: no second refund, no budget rewound."""
    paused = worker(tmp_path, sql_url, "pause")
    assert (paused["status"], paused["reason"], paused["models"], paused["tools"]) == ("needs_human", "approval", 1, 0)
    store = SQLStore(sql_url)
    try:
        pause = store.pause(paused["pause_id"])
        assert pause is not None and pause.status == "pending"
        assert [c["tool"] for c in pause.pending_calls] == ["refund"]
        assert pause.pending_calls[0]["operation_id"] == "refund-42"
    finally:
        store.close()
    assert refunds(tmp_path) == []

    resumed = worker(tmp_path, sql_url, "answer", confirmed=True)
    assert (resumed["status"], resumed["reason"]) == ("completed", "validated_done")
    assert (resumed["models"], resumed["tools"]) == (2, 1)  # 1 before the pause, the final answer after it
    assert refunds(tmp_path) == ["refund-42"]

    again = worker(tmp_path, sql_url, "answer", confirmed=True)
    assert "error" in again and "resumed" in again["error"].lower()
    assert refunds(tmp_path) == ["refund-42"]
    store = SQLStore(sql_url)
    try:
        task = store.task("s-1")
        assert task is not None and (task.used.models, task.used.tools) == (2, 1)
    finally:
        store.close()


def test_a_human_who_keeps_rejecting_ends_the_run(tmp_path: Path, sql_url: str) -> None:
    """Issue 19: the model proposes the refund again after every rejection; each answer resumes the same task,
    so its model budget (not a per-invocation count) ends the run: ``stopped/model_budget``, nothing refunded."""
    result = in_process(tmp_path, sql_url, "pause", model_turns=3)
    rounds = 0
    while result.get("reason") == "approval":
        rounds += 1
        assert rounds <= 5, "rejections must not go on for ever"
        result = in_process(tmp_path, sql_url, "answer", confirmed=False, model_turns=3)
    assert (result["status"], result["reason"], result["models"], result["tools"]) == (
        "stopped",
        "model_budget",
        3,
        0,
    )
    assert refunds(tmp_path) == []
