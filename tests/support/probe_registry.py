"""A registry of probes as an application would keep one (``package.module:attribute``): the refund tool's
declaration, its probe reading the refund provider's records (a SQLite file named by ``PROBE_PROVIDER_DB``; its
``probe_mode`` table may make the probe answer unknown). Operators' processes import it by name
(``loopguard reconcile OP --probe --probes tests.support.probe_registry:PROBES``, ``loopguard serve --probes ...``)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from agents_loopguard.run import declare_tool
from agents_loopguard.values.probes import UNKNOWN, committed, not_committed

__all__ = ["PROBES", "ask", "provider"]


def provider() -> str:
    return os.environ["PROBE_PROVIDER_DB"]


def ask(operation_id: str, args: dict[str, Any]) -> Any:
    """Ask the provider, read-only, whether it holds the refund named ``operation_id``."""
    with sqlite3.connect(provider()) as db:
        row = db.execute("SELECT order_id FROM refunds WHERE operation_id = ?", (operation_id,)).fetchone()
        modes = db.execute("SELECT name FROM sqlite_master WHERE name = 'probe_mode'").fetchall()
        mode = db.execute("SELECT mode FROM probe_mode").fetchone()[0] if modes else "asks"
    if mode == "unknown":
        return UNKNOWN
    if row is None:
        return not_committed(evidence=f"no refund {operation_id} at the provider")
    return committed(f"r-{row[0]}", evidence=f"refund r-{row[0]} found (pid {os.getpid()})")


PROBES = {
    "refund": declare_tool(
        "refund",
        kind="write",
        operation_id=lambda a: f"refund-{a['order_id']}",
        verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
        probe=ask,
    )
}
