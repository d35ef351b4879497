"""Approvals through ADK's own tool confirmation (``require_confirmation``, ``ToolConfirmation``), across OS
processes, on a SQLite file and on PostgreSQL: the pause is stored with the budget, the answer resumes it once with
the counters continuing, a second delivery of the same answer runs nothing twice and never rewinds the budget, and
a run whose proposals a human keeps rejecting ends, and the model budget continues across the resume where ADK's own
``max_llm_calls``, shown alone beside it, restarts from zero (issue 19)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard.store import SQLStore
from tests.support import forked

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
    done = forked.run(
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


@pytest.mark.slow
def test_a_confirmation_resumes_the_stored_pause_once_in_another_process(tmp_path: Path, sql_url: str) -> None:
    """R13: the first process stops at the confirmation (``needs_human/approval``, the pause stored with the
    budget, nothing executed); a second process answers it: the same task continues (counters from 1 model
    call, not 0), the refund runs once and completes the task; a third process delivering the same answer again
    (ADK resumes at least once) is a quiet no-op, as under ADK alone (issue 26: it used to raise
    ``RuntimeError``): answered with the task's outcome, nothing run, no second refund, no budget rewound."""
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
    assert "error" not in again, again
    assert (again["status"], again["reason"], again["models"], again["requests"]) == (
        "completed",
        "validated_done",
        2,
        0,
    )
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


LIMIT = 2
"""The same limit on both sides: ADK's ``RunConfig(max_llm_calls=2)`` alone, and the plugin's
``Budget(model_turns=2)``. The model (the worker's ``busy`` script) looks order 1 up, proposes the refund (ADK asks
for confirmation: the invocation ends there, at the limit) and after the refund's result keeps looking orders up:
only a limit ends it."""


def test_adk_alone_max_llm_calls_restarts_after_a_confirmation_resume(tmp_path: Path) -> None:
    """The baseline, ADK without the plugin (issue 19's measurement): ``max_llm_calls`` is counted per invocation
    in memory, and answering the confirmation starts a new invocation from zero. The first invocation uses its 2
    calls before the confirmation; the one that answers it runs the refund and gets 2 fresh calls, refused only at
    its third: the model was asked 4 times under ``max_llm_calls=2``. (In one process: ADK loses the count without
    a process boundary; the plugin's test below crosses one.)"""
    cfg = {"script": "busy", "guarded": False, "max_llm_calls": LIMIT}
    paused = in_process(tmp_path, "unused://", "pause", **cfg)
    assert (paused["requests"], paused["error"]) == (LIMIT, None)
    resumed = in_process(tmp_path, "unused://", "answer", confirmed=True, **cfg)
    assert resumed["requests"] == LIMIT  # fresh: 2 more calls after the 2 before the pause
    assert resumed["error"] == f"LlmCallsLimitExceededError: Max number of llm calls limit of `{LIMIT}` exceeded"
    assert refunds(tmp_path) == ["refund-42"]


def test_under_the_plugin_the_model_budget_continues_after_a_confirmation_resume(tmp_path: Path, sql_url: str) -> None:
    """R2, R13 against the baseline above: under the plugin the model turns are the task's, kept in the store with
    the pause. The first process uses the 2 turns the budget allows and stops at the confirmation; the process
    that answers it runs the approved refund (once) and asks the model nothing more: the resumed task starts at
    2 model turns, not 0, and ends ``stopped/model_budget``, with 2 model turns in all."""
    cfg = {"script": "busy", "model_turns": LIMIT}
    paused = worker(tmp_path, sql_url, "pause", **cfg)
    assert (paused["status"], paused["reason"], paused["models"], paused["requests"]) == (
        "needs_human",
        "approval",
        LIMIT,
        LIMIT,
    )
    resumed = worker(tmp_path, sql_url, "answer", confirmed=True, **cfg)
    assert (resumed["status"], resumed["reason"]) == ("stopped", "model_budget")
    assert (resumed["models"], resumed["tools"], resumed["requests"]) == (LIMIT, 2, 0)  # the lookup, the refund
    assert refunds(tmp_path) == ["refund-42"]
    store = SQLStore(sql_url)
    try:
        task = store.task("s-1")
        assert task is not None and (task.status, task.used.models) == ("stopped", LIMIT)
    finally:
        store.close()
