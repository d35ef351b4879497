"""A FastMCP-style payment server (mcp 2's ``MCPServer``), the upstream of the proxy tests, run as a real process.

Every ``tools/call`` it receives is appended to its own log (``--log``, JSON lines ``{"tool", "args"}``), and every
effect (a payment sent, a refund made) to the receiver's ledger (``--effects``), *before* the answer: a call whose
answer is lost still happened. Modes:

* ``--lose N``: the first N writes record their effect, then lose their answer (the tool raises);
* ``--die TOOL``: a call of TOOL records its effect, then the process dies (the upstream dies mid-call);
* ``--grow``: after the first ``search``, the server adds ``wire_transfer`` (a tool list that changes);
* ``--http PORT``: serve streamable HTTP instead of stdio.

    python -m tests.support.mcp_upstream --log calls.jsonl --effects effects.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)


def _append(path: str | None, entry: dict[str, Any]) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def read_lines(path: str | Path) -> list[dict[str, Any]]:
    """A log written by the server (what it received, or what it did)."""
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def build(options: argparse.Namespace) -> MCPServer:
    server = MCPServer("payments")
    lost = {"left": options.lose}

    def received(tool: str, args: dict[str, Any]) -> None:
        _append(options.log, {"tool": tool, "args": args, "pid": os.getpid(), "ppid": os.getppid()})

    def effect(tool: str, args: dict[str, Any]) -> str:
        _append(options.effects, {"tool": tool, "args": args})
        if options.slow:
            time.sleep(options.slow)  # the answer is late: a proxy killed now never settles the write
        if options.die == tool:
            os._exit(17)  # the answer never leaves: the process is gone
        if lost["left"] > 0:
            lost["left"] -= 1
            raise ConnectionResetError(f"{tool}: the connection to the bank dropped before it answered")
        return f"{tool} done: {json.dumps(args, sort_keys=True)}"

    @server.tool(annotations=WRITE)
    def pay(invoice: str, amount: int) -> str:
        """Send a payment for an invoice."""
        received("pay", {"invoice": invoice, "amount": amount})
        return effect("pay", {"invoice": invoice, "amount": amount})

    @server.tool(annotations=WRITE)
    def refund(order_id: int) -> str:
        """Refund an order."""
        received("refund", {"order_id": order_id})
        return effect("refund", {"order_id": order_id})

    @server.tool(annotations=READ_ONLY)
    def search(query: str) -> str:
        """Search the invoices."""
        received("search", {"query": query})
        if options.grow and "wire_transfer" not in {t.name for t in server._tool_manager.list_tools()}:
            server.add_tool(wire_transfer, annotations=WRITE)
        return f"invoice INV-1 matches {query!r}"

    @server.tool()
    def lookup(invoice: str) -> str:
        """Look an invoice up (no annotations: the spec's defaults say it may write)."""
        received("lookup", {"invoice": invoice})
        return f"{invoice}: open"

    def wire_transfer(account: str, amount: int) -> str:
        """Wire money to an account."""
        received("wire_transfer", {"account": account, "amount": amount})
        return effect("wire_transfer", {"account": account, "amount": amount})

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log")
    parser.add_argument("--effects")
    parser.add_argument("--lose", type=int, default=0)
    parser.add_argument("--die")
    parser.add_argument("--grow", action="store_true")
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--http", type=int)
    options = parser.parse_args()
    server = build(options)
    if options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
