"""The SDK examples run as documented (``python examples/<name>.py``, no API key) and show what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


@pytest.mark.timeout(150)
def test_the_search_loop_is_cut_keeping_what_was_verified() -> None:
    out = run_example("sdk_search_loop.py")
    assert "outcome: stopped/no_progress" in out
    assert "searches executed: 4" in out and "revision 2, documents ['doc-14', 'doc-22']" in out
    assert '"allowed_next_actions": [' in out and '"deliver_verified"' in out


@pytest.mark.timeout(150)
def test_the_lost_write_is_not_sent_again() -> None:
    out = run_example("sdk_lost_write.py")
    assert "first run: needs_reconciliation/executor_exception operation=confirm-order-42-v3" in out
    assert "second run: needs_reconciliation/unknown_commit" in out and "tool executions reserved: 0" in out
    assert "after reconciliation: completed/validated_done" in out
    assert "the confirmation was applied 1 time(s)" in out
