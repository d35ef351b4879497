"""The examples run as documented (``python examples/<name>.py``), with no API key, against the scripted server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # each example runs as a process of its own

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",  # the examples find the package and the scripted server from their own path
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def record_of(stdout: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(stdout.split("recovery record:", 1)[1])
    return record


@pytest.mark.timeout(90)
def test_raw_chat_completions_example() -> None:
    out = run_example("raw_chat_completions.py")
    assert "outcome: completed/validated_done" in out
    assert "tool_choice per request: ['required', 'required', 'required', 'none']" in out
    assert "requests the server received: 4" in out
    assert "ledger: [('confirm-order-42-v3', 'committed')]" in out
    record = record_of(out)
    used = record["used"]
    assert (used["models"], used["tools"]) == (4, 2) and used["cost"] > 0  # prices given: the cost was settled
    assert record["allowed_next_actions"] == ["return_result"]


@pytest.mark.timeout(90)
def test_raw_responses_example() -> None:
    out = run_example("raw_responses.py")
    assert "outcome: stopped/same_call" in out
    assert "requests the server received: 4" in out
    assert "model:error:APITimeoutError" in out
    record = record_of(out)
    assert (record["status"], record["reason"]) == ("stopped", "same_call")
    assert record["used"] == {"models": 4, "tools": 2, "cost": 0.0}  # the second lookup found nothing new


@pytest.mark.timeout(90)
def test_trigger_reentry_example() -> None:
    out = run_example("trigger_reentry.py")
    assert "change-1 (origin None): completed/validated_done" in out
    assert "change-2 (origin flow:orders-sync:order-42:sync-v1): stopped/trigger_chain" in out
    assert "order 42: version 2, synced; pending change events: False" in out
