"""A workflow that re-triggers itself through its own write, and the trigger guard that cuts the chain (R15).

``orders-sync`` runs when an order row changes: it marks the order synced, which bumps the row's version. A SQLite
trigger turns every row change into a change event, so the flow's own write fires the flow again, which writes
again... Each activation ends fine while the chain feeds itself. The flow writes through the guard with a stable
operation id ("sync order 42 at version 1"), the row keeps the id of the operation that wrote it, and the change
event carries that id as its origin. The trigger guard, whose chain counter lives in the store, recognizes the
second activation as the flow's own echo and stops it: ``stopped/trigger_chain``.

Run it::

    python examples/trigger_reentry.py                 # in memory: one external change, then its echo
    python examples/trigger_reentry.py --max-depth 2   # the chain may re-enter twice, the third echo is stopped

Across processes, with a SQLite file store shared by both (``agents_loopguard.store.sql.SQLStore``)::

    python examples/trigger_reentry.py --store sqlite:///loopguard.db --rows rows.db --seed --deliver 1
    python examples/trigger_reentry.py --store sqlite:///loopguard.db --rows rows.db --deliver 1
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from agents_loopguard import Budget, MemoryStore, Outcome, Reason, Status, Store, Verdict
from agents_loopguard.ops.triggers import TriggerGuard
from agents_loopguard.values.calls import Call

FLOW = "orders-sync"

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id INTEGER PRIMARY KEY, version INTEGER NOT NULL, status TEXT NOT NULL, written_by TEXT
);
-- the receiver's own record of each write, queried by the stable operation id
CREATE TABLE IF NOT EXISTS writes (operation_id TEXT PRIMARY KEY, order_id INTEGER NOT NULL, version INTEGER NOT NULL);
-- the change feed: every row change becomes an event that activates the flow
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, order_id INTEGER NOT NULL, version INTEGER NOT NULL,
    origin_operation_id TEXT, delivered INTEGER NOT NULL DEFAULT 0
);
CREATE TRIGGER IF NOT EXISTS orders_inserted AFTER INSERT ON orders BEGIN
    INSERT INTO changes (order_id, version, origin_operation_id) VALUES (NEW.order_id, NEW.version, NEW.written_by);
END;
CREATE TRIGGER IF NOT EXISTS orders_updated AFTER UPDATE ON orders BEGIN
    INSERT INTO changes (order_id, version, origin_operation_id) VALUES (NEW.order_id, NEW.version, NEW.written_by);
END;
"""


@dataclass(frozen=True)
class Change:
    """One event of the change feed."""

    event_id: str
    order_id: int
    version: int
    origin_operation_id: str | None


class Rows:
    """The application's database: orders, the receiver's write records and the change feed."""

    def __init__(self, path: str = ":memory:") -> None:
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.db.executescript(SCHEMA)

    def add_order(self, order_id: int) -> None:
        """A change from outside the flow (a user creates an order)."""
        self.db.execute("INSERT INTO orders (order_id, version, status) VALUES (?, 1, 'new')", (order_id,))

    def order(self, order_id: int) -> tuple[int, str]:
        version, status = self.db.execute(
            "SELECT version, status FROM orders WHERE order_id = ?", (order_id,)
        ).fetchone()
        return int(version), str(status)

    def mark_synced(self, order_id: int, version: int, *, operation_id: str) -> int:
        """The flow's write: one transaction updates the row and records the write under its operation id."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(
                "UPDATE orders SET version = version + 1, status = 'synced', written_by = ?"
                " WHERE order_id = ? AND version = ?",
                (operation_id, order_id, version),
            )
            self.db.execute(
                "INSERT INTO writes (operation_id, order_id, version) VALUES (?, ?, ?)",
                (operation_id, order_id, version + 1),
            )
        return version + 1

    def committed(self, operation_id: str) -> bool:
        """Ask the receiver, by the stable id, whether the write happened."""
        return self.db.execute("SELECT 1 FROM writes WHERE operation_id = ?", (operation_id,)).fetchone() is not None

    def next_change(self) -> Change | None:
        row = self.db.execute(
            "SELECT seq, order_id, version, origin_operation_id FROM changes WHERE delivered = 0 ORDER BY seq LIMIT 1"
        ).fetchone()
        return None if row is None else Change(f"change-{row[0]}", row[1], row[2], row[3])

    def delivered(self, change: Change) -> None:
        self.db.execute("UPDATE changes SET delivered = 1 WHERE seq = ?", (int(change.event_id.split("-")[1]),))


def sync_order(trigger: TriggerGuard, rows: Rows, change: Change) -> Outcome:
    """The flow, run once per activation: mark the changed order synced, through the guard."""
    entry = trigger.activate(change.event_id, origin_operation_id=change.origin_operation_id)
    if isinstance(entry, Outcome):  # the flow's own echo beyond the chain budget, or an event handled before
        return entry
    guard = trigger.guard(entry, budget=Budget(model_turns=0, tool_executions=2))
    if guard.outcome is not None:
        return guard.outcome
    version, _ = rows.order(change.order_id)
    # the business action, stable across retries, in the flow's namespace (R18): the row is stamped with this id
    operation_id = trigger.operation_id(f"order-{change.order_id}:sync-v{version}")
    call = Call("mark_synced", {"order_id": change.order_id, "version": version}, "write", operation_id)
    ticket = guard.authorize(call)
    if isinstance(ticket, Verdict):
        return guard.end(ticket)
    result: Any = ticket.result
    if not ticket.replay:
        try:
            result = {"status": "ok", "version": rows.mark_synced(change.order_id, version, operation_id=operation_id)}
        except Exception as exc:  # the write's fate is unknown: the guard records it for reconciliation
            return guard.end(guard.fail(ticket, exc))

    def verify(proposal: Any, result: Any) -> dict[str, Any]:
        done = rows.committed(operation_id)
        return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}

    verdict = guard.settle(ticket, result, verify)
    return guard.end(verdict or Verdict(Status.PARTIAL, Reason.PLAN_EXHAUSTED, "the sync was not validated"))


def open_store(url: str | None) -> Store:
    """A MemoryStore, or the SQL store at ``url`` (shared by every process that opens it)."""
    if url is None:
        return MemoryStore()
    from agents_loopguard.store.sql import SQLStore  # type: ignore[import-not-found, unused-ignore]

    store: Store = SQLStore(url)
    return store


def deliver(trigger: TriggerGuard, rows: Rows, *, limit: int) -> list[tuple[Change, Outcome]]:
    """Deliver pending change events to the flow, oldest first, at most ``limit`` of them."""
    handled = []
    while len(handled) < limit and (change := rows.next_change()) is not None:
        handled.append((change, sync_order(trigger, rows, change)))
        rows.delivered(change)
    return handled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="SQL store URL (default: in memory)")
    parser.add_argument("--rows", default=":memory:", help="the application's SQLite database (default: in memory)")
    parser.add_argument("--max-depth", type=int, default=0, help="re-entries the chain may make (default 0)")
    parser.add_argument("--seed", action="store_true", help="create order 42 (a change from outside)")
    parser.add_argument("--deliver", type=int, default=20, help="deliver at most this many change events")
    parser.add_argument("--json", action="store_true", help="print one recovery record per event as JSON")
    args = parser.parse_args(argv)

    store, rows = open_store(args.store), Rows(args.rows)
    if args.seed or (args.rows == ":memory:"):
        rows.add_order(42)
    trigger = TriggerGuard(store, flow=FLOW, max_depth=args.max_depth)
    for change, outcome in deliver(trigger, rows, limit=args.deliver):
        record = outcome.record().to_dict()
        if args.json:
            print(json.dumps({"event_id": change.event_id, "origin": change.origin_operation_id, "record": record}))
            continue
        print(f"{change.event_id} (origin {change.origin_operation_id}): {outcome.status}/{outcome.reason}")
        if outcome.detail:
            print(f"  {outcome.detail}")
        print("  recovery record:", json.dumps(record))
    if not args.json:
        version, status = rows.order(42)
        print(f"order 42: version {version}, {status}; pending change events: {rows.next_change() is not None}")
        for activation in store.activations(FLOW):
            state = "ran" if activation.granted else f"refused ({activation.reason})"
            print(f"activation {activation.activation_id}: depth {activation.depth} of {activation.chain_id}, {state}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
