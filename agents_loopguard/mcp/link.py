"""The proxy's connection to its upstream MCP server: started (a stdio command) or reached (a streamable HTTP URL)
by one long-lived task, shared by every client's calls, and opened again after it broke (a server that died
mid-call is started anew for the next call; the call that was in flight is the guard's to judge).

One ``tools/call`` sent to the upstream is one request: the client's own helpers that may resend a call (input
rounds, a re-list after a header mismatch) are not used, so the upstream's log and the task's counters agree.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment

from .config import Upstream

__all__ = ["UpstreamLink"]

log = logging.getLogger(__name__)
_CONNECT_TIMEOUT = 30.0


class UpstreamLink:
    """The upstream server as the proxy's handlers use it: :meth:`list_tools`, :meth:`call_tool`. Run
    :meth:`hold` in a task group for as long as the proxy serves (it owns the connection's lifetime)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._client: Client | None = None
        self._ready = anyio.Event()
        self._broken = anyio.Event()
        self._closed = False
        self.error: BaseException | None = None
        """Why the last connection attempt failed (``None`` while connected)."""

    def _target(self) -> Any:
        if self.upstream.url is not None:
            return self.upstream.url
        command = self.upstream.command
        return StdioServerParameters(command=command[0], args=list(command[1:]), env=get_default_environment())

    async def hold(self) -> None:
        """Keep one connection open; open a new one after :meth:`broke` (until :meth:`close`)."""
        while not self._closed:
            try:
                async with Client(self._target(), cache=None, read_timeout_seconds=None) as client:
                    self._client, self.error = client, None
                    self._ready.set()
                    await self._broken.wait()
            except Exception as exc:  # the upstream could not be started or reached: tell the waiting calls
                self.error = exc
                log.warning("upstream %s: %s: %s", self.upstream.name, type(exc).__name__, exc)
                self._ready.set()
                await anyio.sleep(0.2)
            finally:
                self._client = None
            self._ready, self._broken = anyio.Event(), anyio.Event()

    def broke(self) -> None:
        """The connection failed under a call: the next call opens a new one."""
        self._broken.set()

    def close(self) -> None:
        self._closed = True
        self._broken.set()

    async def client(self) -> Client:
        """The connected client (waiting for the connection), or the error that kept it from connecting."""
        with anyio.fail_after(_CONNECT_TIMEOUT):
            await self._ready.wait()
        if self._client is None:
            raise ConnectionError(f"upstream {self.upstream.name!r} is not reachable: {self.error}")
        return self._client

    async def list_tools(self) -> list[Any]:
        """Every tool the upstream lists now (all pages)."""
        client = await self.client()
        tools: list[Any] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools
        except Exception:
            self.broke()
            raise

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One ``tools/call`` to the upstream; the result as the plain JSON value the ledger stores."""
        client = await self.client()
        try:
            result = await client.session.call_tool(name, arguments)
        except Exception:
            self.broke()
            raise
        dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped
