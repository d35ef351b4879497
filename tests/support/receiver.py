"""A refund provider for the probe tests: a real SQLite file of refunds keyed by the operation id, the refund tool's
body that writes it (or fails before, or loses its answer after) and its probe that reads it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from agents_loopguard.values.probes import UNKNOWN, committed, not_committed
from tests.support.adapters import Tool

__all__ = ["Provider", "Receiver"]


class Receiver:
    """The refund provider: one row per refund, keyed by the operation id the write names."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS refunds (operation_id TEXT PRIMARY KEY, order_id TEXT, amount REAL)")

    def refund(self, operation_id: str, order_id: str, amount: float) -> str:
        with sqlite3.connect(self.path) as db:
            db.execute("INSERT INTO refunds VALUES (?, ?, ?)", (operation_id, order_id, amount))
        return f"r-{order_id}"

    def find(self, operation_id: str) -> str | None:
        with sqlite3.connect(self.path) as db:
            row = db.execute("SELECT order_id FROM refunds WHERE operation_id = ?", (operation_id,)).fetchone()
        return None if row is None else f"r-{row[0]}"

    def refunds(self) -> int:
        with sqlite3.connect(self.path) as db:
            return int(db.execute("SELECT count(*) FROM refunds").fetchone()[0])


class Provider:
    """The refund tool's body and probe, against one receiver; ``plan`` says how each body call goes: ``lost``
    (the refund is made, its answer lost), ``refused`` (the connection fails before anything is sent), else ok."""

    def __init__(self, receiver: Receiver, plan: list[str], probe: str | None = "asks") -> None:
        self.receiver, self.plan, self.probe_mode = receiver, plan, probe
        self.bodies = 0
        self.probes = 0

    def tool(self) -> Tool:
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.bodies += 1
            step = self.plan.pop(0) if self.plan else "ok"
            if step == "refused":
                raise ConnectionError("connection refused: nothing was sent")
            receipt = self.receiver.refund(f"refund-{order_id}", order_id, amount)
            if step == "lost":
                raise TimeoutError("the provider's answer was lost")
            return receipt

        return Tool(
            refund,
            kind="write",
            operation_id=lambda a: f"refund-{a['order_id']}",
            verify=lambda a, out: (
                {"revision": 1, "done": True, "effect": "committed"}
                if out == f"r-{a['order_id']}"
                else {"revision": 0, "done": False, "effect": "unknown"}
            ),
            probe=self.ask if self.probe_mode is not None else None,
        )

    def ask(self, operation_id: str, args: dict[str, Any]) -> Any:
        self.probes += 1
        if self.probe_mode == "unknown":
            return UNKNOWN
        if self.probe_mode == "raises":
            raise ConnectionError("the provider's status API is down")
        if self.probe_mode == "garbage":
            return {"found": True}
        receipt = self.receiver.find(operation_id)
        if receipt is None:
            return not_committed(evidence=f"no refund {operation_id} at the provider")
        return committed(receipt, evidence=f"refund {receipt} found for {args['order_id']}")
