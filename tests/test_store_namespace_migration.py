"""R18 (scopes and audit): migration 0005 moves the activations' writes of a store written by schema 4 (the fixture
tests/fixtures/store-v4.*, made by that release through TriggerGuard) into their flows' namespaces, with every
reference to them, and adds the decision's note and time to the pauses; on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agents_loopguard import Outcome, Reason, RecoveryRecord
from agents_loopguard.ops.operator import pause_view
from agents_loopguard.ops.triggers import TriggerGuard
from agents_loopguard.store import SQLStore
from agents_loopguard.store.sql import SCHEMA_VERSION
from tests.test_store_migrations import postgres_fixture, sqlite_fixture

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def v4_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_fixture(tmp_path, version=4)
    return postgres_fixture(str(request.getfixturevalue("pg_schema_url")), version=4)


@pytest.mark.slow
def test_r18_migration_moves_activation_writes_and_every_reference_into_the_flow_namespace(v4_store: str) -> None:
    """R18 (scopes and audit): the ledger, the trace, the echo's origin and outcome, and the operator's transition
    name the namespaced id after `loopguard migrate`; nothing else moves, and the chain still holds."""
    done = subprocess.run(
        [sys.executable, "-m", "agents_loopguard.cli", "--db", v4_store, "migrate"],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0 and f"from schema version 4 to {SCHEMA_VERSION}" in done.stdout, done.stderr
    with SQLStore(v4_store) as store:
        ids = {op.operation_id: op.task_id for op in store.operations()}
        assert ids == {
            "flow:orders:fx-row-1": "orders:fx-flow-1",
            "flow:orders:fx-row-3": "orders:fx-flow-3",
            "flow:orders:row-by-act-0": "fx-act-0",
            "inv-7-pay": "fx-unknown",  # agents' operations keep their ids
            "inv-8-pay": "fx-reconciled",
            "inv-9-pay": "fx-not-committed",
            "order-42-confirm": "fx-completed",
        }
        assert [e.operation_id for e in store.trace("orders:fx-flow-1") if e.operation_id] == ["flow:orders:fx-row-1"]
        assert [e.operation_id for e in store.trace("fx-completed") if e.operation_id] == ["order-42-confirm"]
        echo = store.task("orders:fx-flow-2")
        assert echo is not None and echo.outcome is not None
        assert RecoveryRecord.from_json(echo.outcome).operation_id == "flow:orders:fx-row-1"  # still a valid record
        assert store.activation("orders:fx-flow-2").origin_operation_id == "flow:orders:fx-row-1"  # type: ignore[union-attr]
        answers = {t.operation_id: t.task_id for t in store.transitions() if t.kind == "reconcile"}
        assert answers == {
            "flow:orders:fx-row-3": "orders:fx-flow-3",
            "inv-8-pay": "fx-reconciled",
            "inv-9-pay": "fx-not-committed",
        }
        decided = pause_view(store, "pause-decided")  # decided before the note was kept: no note, no time
        assert (decided["decided_by"], decided["decided_why"], decided["decided_at"]) == ("ana", "", None)
        again = TriggerGuard(store, flow="orders", max_depth=0).activate("fx-flow-9", origin_operation_id="fx-row-1")
        assert isinstance(again, Outcome) and again.reason is Reason.TRIGGER_CHAIN
