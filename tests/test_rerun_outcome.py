"""A rerun of a finished task returns the stored outcome with its verified value (issue 21, item 3).

The value is kept in the stored recovery record (``validated_value``, redacted like the trace), so a second run of
the same task, on every store and in another OS process, returns what the first run verified, and ``loopguard
record`` carries what ``deliver_verified`` would deliver.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, function_call

from agents_loopguard import Budget, Guard, Reason, RecoveryRecord, Status
from agents_loopguard.sdk import guarded_tool, run_guarded
from agents_loopguard.store import Store

ROOT = Path(__file__).resolve().parent.parent
set_tracing_disabled(True)


def _first_program() -> str:
    """The README's first program, as a reader pastes it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A first program", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "the README's first program is gone"
    return found.group(1)


def _search_agent(hits: list[str]) -> Agent[Any]:
    found: set[str] = set()

    def new_documents(args: dict[str, Any], output: list[str]) -> dict[str, Any]:
        found.update(output)
        return {"revision": len(found), "done": False, "effect": "none"}

    @guarded_tool(verify=new_documents)
    def search_docs(query: str) -> list[str]:
        """Search the policy documents."""
        return hits

    loop = [[function_call("search_docs", {"query": "refunds"}, call_id=f"c{i}")] for i in range(10)]
    return Agent(name="support", model=ScriptedModel(loop), tools=[search_docs])


def test_a_rerun_returns_the_verified_value_on_every_store(store_factory: Callable[[], Store]) -> None:
    budget = Budget(model_turns=10, tool_executions=8)
    first = asyncio.run(
        run_guarded(_search_agent(["doc-14"]), "refunds?", budget=budget, task_id="t", store=store_factory())
    )
    assert (first.status, first.value) == (Status.STOPPED, ["doc-14"])
    again = asyncio.run(
        run_guarded(_search_agent(["other"]), "refunds?", budget=budget, task_id="t", store=store_factory())
    )
    assert (again.status, again.reason, again.value, again.used) == (first.status, first.reason, ["doc-14"], first.used)
    record = store_factory().task("t")
    assert record is not None and record.outcome is not None
    assert RecoveryRecord.from_json(record.outcome).validated_value == ["doc-14"]


def test_the_stored_value_is_redacted_and_a_guard_reopened_reads_it(store_factory: Callable[[], Store]) -> None:
    guard = Guard(budget=Budget(2, 2), store=store_factory(), task_id="t-secret", secrets=["s3cr3t-value"])
    guard.last_good = {"note": "key s3cr3t-value", "password": "hunter2", "rows": (1, 2)}
    guard.finish(Status.PARTIAL, Reason.UNVERIFIED_FINAL)
    reopened = Guard(budget=Budget(2, 2), store=store_factory(), task_id="t-secret")
    assert reopened.outcome is not None
    assert reopened.outcome.value == {"note": "key [redacted]", "password": "[redacted]", "rows": [1, 2]}
    assert reopened.outcome.record().validated_value == reopened.outcome.value


def test_an_old_record_without_a_value_still_reads() -> None:
    old = {
        "task_id": "t",
        "status": "stopped",
        "reason": "same_call",
        "validated_revision": 1,
        "used": {"models": 1, "tools": 1},
        "allowed_next_actions": ["deliver_verified", "human_review", "close"],
    }
    assert RecoveryRecord.from_json(json.dumps(old)).to_outcome().value is None


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_readme_program_run_twice_in_two_processes_keeps_its_value(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'loopguard.db'}" if backend == "sqlite" else request.getfixturevalue("pg_schema_url")
    program = tmp_path / "first.py"
    program.write_text(_first_program(), encoding="utf-8")
    env = {**os.environ, "LOOPGUARD_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    runs = [
        subprocess.run(
            [sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert "kept: ['doc-14 Refunds within 30 days']" in runs[0].stdout
    assert runs[1].stdout == runs[0].stdout
    shown = subprocess.run(
        [sys.executable, "-m", "agents_loopguard", "--db", url, "record", "refund-question"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["validated_value"] == ["doc-14 Refunds within 30 days"]
