"""The SDK examples run as documented (``python examples/<name>.py``, no API key) and show what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each example runs as a process of its own

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


@pytest.mark.postgres
@pytest.mark.timeout(150)
def test_the_dbos_example_runs_the_refund_once(pg_schema_url: str) -> None:
    """The DBOS example (docs/durable.md) on the test server, its store in a fresh schema (whatever an earlier
    version left in the database's own): the workflow run again runs no second refund."""
    import os

    env = {**os.environ, "LOOPGUARD_DATABASE_URL": pg_schema_url}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "dbos_refund.py")], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "first run: completed/validated_done, model turns 2" in done.stdout
    assert "the same workflow again: completed/validated_done, model turns 2" in done.stdout
    assert "refund bodies run: 1" in done.stdout


def test_the_dbos_examples_operation_id_is_the_same_in_every_process() -> None:
    """The refund's operation id is its business key: two processes (a worker and the one that recovers its
    workflow) name the same refund alike, so the ledger protects the write across a crash (a per-process run id in
    the key made the recovering process's key another one)."""
    probe = (
        "import runpy; from agents_loopguard.sdk import tool_spec; "
        "spec = tool_spec(runpy.run_path('examples/dbos_refund.py')['refund']); "
        "print(spec.operation_of({'order': 42, 'amount': 30}))"
    )
    keys = [
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=EXAMPLES.parent)
        for _ in range(2)
    ]
    assert all(key.returncode == 0 for key in keys), keys[0].stderr[-2000:]
    assert keys[0].stdout == keys[1].stdout == "refund-order-42\n"
