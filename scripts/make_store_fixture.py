"""Write a store of the current schema version, for the migration tests: tests/fixtures/store-v<N>.sqlite and,
with ``--postgres URL``, tests/fixtures/store-v<N>.postgres.sql (a ``pg_dump --inserts`` of a schema of its own).

Run it with the agents_loopguard whose schema the fixture must keep, before a migration changes that schema:

    python scripts/make_store_fixture.py --postgres postgresql+psycopg://postgres@127.0.0.1:5432/test

Every table gets rows, written through the public API only (the way a real deployment wrote them): tasks in each
terminal status, the ledger in each state, the trace, repetitions, seen keys, activations, pauses (pending, decided,
resumed) and transitions, with non-ASCII text, large integers and NULLs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy.engine import make_url  # noqa: E402

from agents_loopguard import Budget, Guard, Reason, Status, create_runner  # noqa: E402
from agents_loopguard.ops.approvals import decide, pause_digest  # noqa: E402
from agents_loopguard.ops.recovery import reconcile, recover  # noqa: E402
from agents_loopguard.store import SQLStore, Store, TraceEntry  # noqa: E402
from agents_loopguard.store.sql import SCHEMA_VERSION  # noqa: E402
from agents_loopguard.values.calls import Ticket  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
PG_SCHEMA = "loopguard_fixture"
"""The schema the PostgreSQL fixture is written in; the test loads the dump into a schema of its own instead."""
BIG = 2**53 + 1
"""Larger than a double holds exactly: the migration must keep it exact."""


def populate(store: Store) -> None:
    """Rows in every table, through the public API (deterministic clocks; ids of transitions are random)."""
    _completed(store)
    _unknown_and_reconciled(store)
    _stopped_and_recovered(store)
    _pauses(store)
    _activations_and_seen(store)
    _flows(store)


def _completed(store: Store) -> None:
    def verify(call: Any, result: Any) -> dict[str, Any]:
        write = call["kind"] == "write"
        return {"revision": 2 if write else 1, "done": write, "effect": "committed" if write else "none"}

    run = create_runner(
        budget=Budget(model_turns=BIG, tool_executions=10, deadline=4_102_444_800.5),
        store=store,
        now=lambda: 100.0,
        execute=lambda call: {"status": "ok", "note": "réglé ✓", "n": 2**53 - 1},  # results are I-JSON: safe ints
        verify=verify,
        task_id="fx-completed",
    )
    read = {"tool": "lookup", "kind": "read", "args": {"order": 42, "q": "ünïcode"}}
    write = {"tool": "confirm", "kind": "write", "operation_id": "order-42-confirm", "args": {"order": 42, "v": 3}}
    assert run([read, write]).status is Status.COMPLETED


def _lost(store: Store, task_id: str, operation_id: str) -> None:
    def lost(call: Any) -> Any:
        raise TimeoutError("no response")

    run = create_runner(
        budget=Budget(model_turns=6, tool_executions=3),
        store=store,
        now=lambda: 200.0,
        execute=lost,
        verify=lambda call, result: None,
        task_id=task_id,
    )
    pay = {"tool": "pay", "kind": "write", "operation_id": operation_id, "args": {"invoice": 7, "amount": 120}}
    assert run([pay]).status is Status.NEEDS_RECONCILIATION


def _unknown_and_reconciled(store: Store) -> None:
    _lost(store, "fx-unknown", "inv-7-pay")
    _lost(store, "fx-reconciled", "inv-8-pay")
    reconcile(store, "inv-8-pay", "committed", who="ops", why="the receiver has it", result={"receipt": "r-8"}, now=210)
    _lost(store, "fx-not-committed", "inv-9-pay")
    reconcile(store, "inv-9-pay", "not_committed", who="ops", why="no such payment", now=220)


def _stopped_and_recovered(store: Store) -> None:
    guard = Guard(budget=Budget(model_turns=5, tool_executions=5, cost=1.0), store=store, task_id="fx-stopped")
    assert guard.begin_turn(now=300.0) is None
    assert store.reserve_cost("fx-stopped", 0.75).granted
    store.settle_cost("fx-stopped", 0.75, 0.5)
    ticket = guard.authorize({"tool": "poll", "kind": "poll", "args": {"job": "j-1"}}, now=301.0)
    assert isinstance(ticket, Ticket)
    guard.settle(ticket, {"status": "pending"}, lambda call, result: {"revision": 0, "effect": "none"})
    store.request_stop("fx-stopped", "operator: ça suffit", now=302.0)
    verdict = guard.begin_turn(now=303.0)
    assert verdict is not None and verdict.reason is Reason.STOP_REQUESTED
    guard.end(verdict)
    recover(store, "fx-stopped", who="lead", why="false alarm", extend={"model_turns": 2, "cost": 0.5}, now=304.0)


def _pauses(store: Store) -> None:
    calls = [{"call_id": "c1", "tool": "wipe", "arguments": '{"disk":"d1"}', "operation_id": "wipe-d1"}]
    for task_id, pause_id in (("fx-pending", "pause-pending"), ("fx-decided", "pause-decided"), ("fx-resumed", "p-r")):
        guard = Guard(budget=Budget(model_turns=4, tool_executions=2, deadline=500.0), store=store, task_id=task_id)
        assert guard.begin_turn(now=400.0) is None
        state = '{"run": "state", "agent": "ops"}'
        outcome = {"status": "needs_human", "reason": "approval", "pause_id": pause_id}
        digest = pause_digest(task_id, state, calls)
        store.save_pause(task_id, pause_id, state, calls, digest=digest, outcome=outcome, now=401.0)
    decide(store, "pause-decided", who="ana", approve_all=True, why="checked", now=402.0)
    store.claim_pause("p-r", who="worker-2", decisions={"c1": "reject"}, why="not today", now=403.0)


def _activations_and_seen(store: Store) -> None:
    assert store.activate("orders", "fx-act-0", origin_operation_id=None, max_depth=1, now=500.0).granted
    store.ensure_task("fx-act-0", Budget(model_turns=1, tool_executions=1), now=500.0)
    store.reserve_operation("fx-act-0", "row-by-act-0", "fp-row", "save", now=501.0)
    assert store.activate("orders", "fx-act-1", origin_operation_id="row-by-act-0", max_depth=1, now=502.0).granted
    store.ensure_task("fx-pages", Budget(model_turns=9, tool_executions=9), revision=3, now=600.0)
    entry = TraceEntry(kind="tool", tool="list", args={"cursor": "c-1"}, result_class="ok", at=601.0)
    store.record_execution("fx-pages", entry, revision=4, seen=["cursor:c-1", "record:1", "record:2"])


def _flow_write(trigger: Any, operation_id: str) -> str:
    """The id a flow's write is made under, by the version running this script: since schema 5 (R18) in the flow's
    namespace (``TriggerGuard.operation_id``), before that the id as the workflow gave it."""
    namespaced = getattr(trigger, "operation_id", None)
    return str(namespaced(operation_id)) if namespaced is not None else operation_id


def _flows(store: Store) -> None:
    """Activations through TriggerGuard: a committed write, its echo refused (the origin in its outcome), and a
    write whose answer was lost, then reconciled (the operation on a transition)."""
    from agents_loopguard.ops.triggers import TriggerGuard

    def committed(call: Any, result: Any) -> dict[str, Any]:
        return {"revision": 1, "done": True, "effect": "committed"}

    orders = TriggerGuard(store, flow="orders", max_depth=0, clock=lambda: 700.0)
    first = orders.activate("fx-flow-1")
    guard = orders.guard(first, budget=Budget(model_turns=0, tool_executions=1))  # type: ignore[arg-type]
    row = _flow_write(orders, "fx-row-1")
    ticket = guard.authorize({"tool": "save", "kind": "write", "operation_id": row, "args": {"row": 1}})
    assert isinstance(ticket, Ticket)
    verdict = guard.settle(ticket, {"status": "ok", "row": 1}, committed)
    assert verdict is not None and guard.end(verdict).status is Status.COMPLETED
    echo = orders.activate("fx-flow-2", origin_operation_id=row)
    assert getattr(echo, "reason", None) is Reason.TRIGGER_CHAIN
    lost = orders.activate("fx-flow-3")
    guard = orders.guard(lost, budget=Budget(model_turns=0, tool_executions=1))  # type: ignore[arg-type]
    row = _flow_write(orders, "fx-row-3")
    ticket = guard.authorize({"tool": "save", "kind": "write", "operation_id": row, "args": {"row": 3}})
    assert isinstance(ticket, Ticket)
    assert guard.end(guard.fail(ticket, TimeoutError("no answer"))).status is Status.NEEDS_RECONCILIATION
    reconcile(store, row, "committed", who="ops", why="the row is there", result={"row": 3}, now=710.0)


def write_sqlite() -> Path:
    target = FIXTURES / f"store-v{SCHEMA_VERSION}.sqlite"
    scratch = FIXTURES / f".store-v{SCHEMA_VERSION}.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    with SQLStore(f"sqlite:///{scratch / 'store.sqlite'}") as store:
        populate(store)
    # the last connection checkpointed the log into the file: one self-contained file
    shutil.copyfile(scratch / "store.sqlite", target)
    shutil.rmtree(scratch)
    return target


def write_postgres(url: str) -> Path:
    import psycopg

    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{PG_SCHEMA}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{PG_SCHEMA}"')
    try:
        in_schema = make_url(url).update_query_dict({"options": f"-csearch_path={PG_SCHEMA}"})
        with SQLStore(in_schema) as store:
            populate(store)
        target = FIXTURES / f"store-v{SCHEMA_VERSION}.postgres.sql"
        dump = subprocess.run(
            ["pg_dump", "--schema", PG_SCHEMA, "--inserts", "--no-owner", "--no-privileges", "--no-comments", libpq],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        target.write_text(dump)
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{PG_SCHEMA}" CASCADE')
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", metavar="URL", help="also write the PostgreSQL fixture, on this server")
    args = parser.parse_args()
    print(write_sqlite())
    if args.postgres:
        print(write_postgres(args.postgres))


if __name__ == "__main__":
    main()
