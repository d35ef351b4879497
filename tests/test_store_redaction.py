"""Operator text (who, why, decision notes, stop reasons) is redacted before it is stored: byte scans of the SQLite
file and its log, and of ``pg_dump``'s output, after every operator step."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from agents_loopguard import Budget, Guard, Reason, Status, create_runner
from agents_loopguard.ops.approvals import claim_for_resume, decide, decisions_for, load_for_resume, pause_digest
from agents_loopguard.ops.recovery import reconcile, recover
from agents_loopguard.store import SQLStore
from tests.conftest import libpq_url

pytestmark = pytest.mark.timeout(60)

VISIBLE = "ops-visible-7731"
"""Plain operator text that must reach the database (proves the scan sees the text at all)."""
REGISTERED = "REGISTERED-OPS-SECRET-55"
LEAKS = ["hunter2", "TOKEN-SECRET-9911", "sk-operatorkey0123456789", REGISTERED, "bearer.SECRET.xyz"]
WHO = f"{VISIBLE} password=hunter2"


def operator_steps(store: SQLStore) -> None:
    """Every operator step, each given text with credentials in it."""

    def lost(call: Any) -> Any:
        raise TimeoutError("no response")

    run = create_runner(
        budget=Budget(model_turns=5, tool_executions=5),
        store=store,
        task_id="t-pay",
        execute=lost,
        verify=lambda c, r: None,
    )
    pay = {"tool": "pay", "kind": "write", "operation_id": "inv-1", "args": {"amount": 5}}
    assert run([pay]).status is Status.NEEDS_RECONCILIATION
    reconcile(
        store,
        "inv-1",
        "committed",
        who=WHO,
        why="the bank confirmed, token=TOKEN-SECRET-9911",
        result={"receipt": "r-1", "note": "key sk-operatorkey0123456789"},
    )

    guard = Guard(budget=Budget(model_turns=1, tool_executions=1), store=store, task_id="t-stop")
    store.request_stop("t-stop", f"{VISIBLE} said stop, password=hunter2")
    guard.end(guard.begin_turn())  # type: ignore[arg-type]
    recover(store, "t-stop", who=WHO, why=f"approved by {REGISTERED}", secrets=[REGISTERED])

    calls = [{"call_id": "c1", "tool": "wipe", "arguments": "{}", "operation_id": "wipe-1"}]
    for task_id, pause_id in (("t-decided", "p-1"), ("t-claimed", "p-2")):
        Guard(budget=Budget(model_turns=2, tool_executions=2), store=store, task_id=task_id)
        store.save_pause(
            task_id,
            pause_id,
            "{}",
            calls,
            digest=pause_digest(task_id, "{}", calls),
            outcome={"status": "needs_human", "reason": "approval", "pause_id": pause_id},
        )
    decide(store, "p-1", who=WHO, approve_all=True, why="Authorization: Bearer bearer.SECRET.xyz")
    record = load_for_resume(store, "p-2")
    chosen = decisions_for(record, {"c1": "reject"})
    claim_for_resume(
        store,
        record,
        chosen,
        who=f"{REGISTERED} {WHO}",
        why="token=TOKEN-SECRET-9911",
        given=True,
        secrets=[REGISTERED],
    )
    claimed = store.pause("p-2")
    assert claimed is not None and claimed.resumed_by == f"[redacted] {VISIBLE} password=[redacted]"
    assert [t.who for t in store.transitions()] == [
        f"{VISIBLE} password=[redacted]",
        f"{VISIBLE} password=[redacted]",
        f"[redacted] {VISIBLE} password=[redacted]",
    ]
    assert store.task("t-stop").stop_reason is None and store.pause("p-1").decided_by == WHO.replace(
        "hunter2", "[redacted]"
    )  # type: ignore[union-attr]


def assert_clean(blob: bytes, where: str) -> None:
    assert VISIBLE.encode() in blob, f"{where}: the scan does not see the stored text"
    leaked = [s for s in LEAKS if s.encode() in blob]
    assert leaked == [], f"{where} holds operator secrets: {leaked}"


def test_no_operator_secret_reaches_the_sqlite_file_or_its_log(tmp_path: Path) -> None:
    """Rules: R4 (trace)."""
    db = tmp_path / "lg.db"
    store = SQLStore(f"sqlite:///{db}")
    operator_steps(store)
    files = [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]
    assert Path(f"{db}-wal") in files
    assert_clean(b"".join(p.read_bytes() for p in files), "the SQLite files (db, -wal, -shm)")
    store.close()
    assert_clean(db.read_bytes(), "the SQLite database after checkpoint")


@pytest.mark.postgres
def test_no_operator_secret_reaches_pg_dump(pg_schema_url: str) -> None:
    """Rules: R4 (trace)."""
    with SQLStore(pg_schema_url) as store:
        operator_steps(store)
        assert store.reserve_turn("t-stop").reason is not Reason.STOP_REQUESTED
    schema = dict(make_url(pg_schema_url).query)["options"].split("=", 1)[1]
    dump = subprocess.run(
        ["pg_dump", "--schema", schema, libpq_url(pg_schema_url).split("?")[0]],
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout
    assert b"loopguard_transitions" in dump
    assert_clean(dump, "pg_dump")
