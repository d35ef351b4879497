"""What an MCP tool's result means to the guard, framework-free: operation ids from the arguments, the built-in
``verify = "result"`` of a write, and a ``CallToolResult`` as the plain JSON value the ledger stores.

>>> canonical_operation_id("refund")({"order_id": 42, "amount": 10}) == \\
...     canonical_operation_id("refund")({"amount": 10, "order_id": 42})
True
>>> templated_operation_id("refund-{order_id}", ["order_id"])({"order_id": 42})
'refund-42'
>>> result_evidence({"content": [], "isError": False}, revision=3)
{'revision': 4, 'done': False, 'effect': 'committed'}
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from ..values.canonical import canonical_json

__all__ = [
    "canonical_operation_id",
    "result_evidence",
    "result_text",
    "result_verify",
    "templated_operation_id",
]


def canonical_operation_id(tool: str) -> Callable[[dict[str, Any]], str]:
    """The default operation id of a write: the tool and the SHA-256 of its canonical (RFC 8785) arguments, so the
    same arguments, in any key order, name the same operation (and a different amount another one)."""

    def operation_id(args: dict[str, Any]) -> str:
        return f"{tool}:{hashlib.sha256(canonical_json(args)).hexdigest()[:32]}"

    return operation_id


def templated_operation_id(template: str, fields: Sequence[str]) -> Callable[[dict[str, Any]], str]:
    """An operation id from ``template`` (``"refund-{order_id}"``): each field is the argument's value (a string as
    is, anything else as canonical JSON); a missing argument raises ``KeyError`` (the write is refused as
    ``missing_operation_id``)."""

    def operation_id(args: dict[str, Any]) -> str:
        values = {}
        for name in fields:
            value = args[name]
            values[name] = value if isinstance(value, str) else canonical_json(value).decode()
        return template.format_map(values)

    return operation_id


def result_evidence(result: Any, *, revision: int) -> dict[str, Any]:
    """The evidence of ``verify = "result"``: a call the server answered without ``isError`` committed (the task's
    revision advances); an error answer proves nothing about the effect, so the write stays ``unknown`` (to
    reconcile; never sent again). A server whose errors prove no effect deserves a verify of its own."""
    if not isinstance(result, dict) or result.get("isError") is True:
        return {"revision": revision, "done": False, "effect": "unknown"}
    return {"revision": revision + 1, "done": False, "effect": "committed"}


def result_verify(args: dict[str, Any], result: Any) -> dict[str, Any]:
    """The marker of ``verify = "result"``: the proxy binds it to the task's revision for each call (see
    :func:`result_evidence`); called unbound, the revision stays where it was."""
    return result_evidence(result, revision=0)


def result_text(result: Any) -> str:
    """The text content of a result (a ``CallToolResult`` as a dict), joined: what a client's model reads.

    >>> result_text({"content": [{"type": "text", "text": "paid"}, {"type": "image", "data": "..."}]})
    'paid'
    """
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, list):
        return ""
    parts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
    return "\n".join(p for p in parts if isinstance(p, str))
