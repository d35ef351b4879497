"""The probe of the proxy tests' payments, as ``[tools.pay] probe = "tests.support.mcp_probes:paid"`` names it: it
reads the receiver's ledger of effects (``MCP_EFFECTS``, the upstream's ``--effects`` file) by the payment's
arguments, read-only, and answers with the result the upstream would have given (a ``CallToolResult`` as JSON)."""

from __future__ import annotations

import json
import os
from typing import Any

from agents_loopguard.values.probes import committed, not_committed
from tests.support.mcp_upstream import read_lines

__all__ = ["paid"]


def paid(operation_id: str, args: dict[str, Any]) -> Any:
    effects = read_lines(os.environ["MCP_EFFECTS"]) if os.path.exists(os.environ["MCP_EFFECTS"]) else []
    if not any(e["tool"] == "pay" and e["args"] == args for e in effects):
        return not_committed(evidence=f"no payment {operation_id} in the receiver's ledger")
    text = f"pay done: {json.dumps(args, sort_keys=True)}"
    result = {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}, "isError": False}
    return committed(result, evidence=f"{operation_id} paid")
