"""The proxy's stdio read stream, screened: a request the MCP library cannot read still gets an answer.

The ``mcp`` package's stdio server hands the session an exception for a line it cannot parse (JSON nested deeper
than its parser's 200 levels, or invalid JSON), and the session drops it with a debug log: the client waits forever
for the answer to that request. The proxy reads such a line once more: when it names a request id, the exception is
replaced by a ``tools/call`` of :data:`UNREADABLE` with that id, which the proxy answers as a tool error (nothing
reaches the upstream, nothing is reserved). A line without a request id is dropped as before.

>>> from pydantic import ValidationError
>>> try:
...     types.jsonrpc_message_adapter.validate_json('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": [}')
... except ValidationError as exc:
...     replaced = answerable(exc)
>>> replaced.message.id, replaced.message.params["name"]
(7, 'loopguard:unreadable')
"""

from __future__ import annotations

import json
import re
from types import TracebackType
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["UNREADABLE", "WHY", "ScreenedStream", "answerable"]

UNREADABLE = "loopguard:unreadable"
"""The tool name of a replaced request: the proxy answers it as an error whose text says why."""

WHY = (
    "the proxy could not read this request (invalid JSON, or arguments nested deeper than 200 levels): "
    "nothing was sent to the upstream"
)
_ID = re.compile(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')
_NAME = re.compile(r'"params"\s*:\s*\{\s*"name"\s*:\s*"([^"\\]{1,128})"')


def _request(line: str) -> tuple[int | str | None, Any]:
    """The id and the ``_meta`` of the request on ``line``, read by Python's parser (deeper than the library's) or,
    past its depth too, the id from the first ``"id":`` and no ``_meta``."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        found = _ID.search(line)
        message = {"id": json.loads(found.group(1))} if found else None
    if not isinstance(message, dict):
        return None, None
    request_id, params = message.get("id"), message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    valid = isinstance(request_id, int | str) and not isinstance(request_id, bool)
    return (request_id if valid else None), (meta if isinstance(meta, dict) else None)


def answerable(error: Exception) -> SessionMessage | Exception:
    """A ``tools/call`` of :data:`UNREADABLE` under the id (and ``_meta``) of the unreadable request ``error`` is
    about, or ``error`` as is (not a parse error, or no request id to answer)."""
    line = None
    if isinstance(error, ValidationError):
        line = next((e["input"] for e in error.errors() if isinstance(e.get("input"), str)), None)
    request_id, meta = _request(line) if line is not None else (None, None)
    if request_id is None:
        return error
    named = _NAME.search(line[:4096]) if line is not None else None
    arguments = {"why": WHY, "tool": named.group(1)} if named else {"why": WHY}
    params: dict[str, Any] = {"name": UNREADABLE, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/call", params=params))


class ScreenedStream:
    """The stdio server's read stream with each unreadable request replaced (see :func:`answerable`)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item = await self._inner.receive()
        return answerable(item) if isinstance(item, Exception) else item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> ScreenedStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        item = await self._inner.__anext__()
        return answerable(item) if isinstance(item, Exception) else item

    async def __aenter__(self) -> ScreenedStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc, tb)
        return result
