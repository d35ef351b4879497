"""Run ``loopguard mcp``: check the configuration and the upstream's tools, then serve the guarded tools to MCP
clients over stdio (the default: a client starts ``loopguard mcp proxy.toml`` as its server command) or streamable
HTTP (``--http 127.0.0.1:8765``: clients connect to ``http://127.0.0.1:8765/mcp``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from ..store.base import Store
from .config import ConfigError, ProxyConfig
from .proxy import GuardedProxy
from .stdio import ScreenedStream

__all__ = ["ProxyRefused", "build_server", "parse_address", "run_proxy"]

log = logging.getLogger(__name__)


class ProxyRefused(ConfigError):
    """The proxy does not start: the upstream lists tools that may change the world and nobody declared."""


def build_server(proxy: GuardedProxy) -> Server[Any]:
    """The MCP server clients talk to: the upstream's tools, every call through ``proxy``."""
    name = f"loopguard-{proxy.config.upstream.name}"
    return Server(name, on_list_tools=proxy.list_tools, on_call_tool=proxy.call_tool)


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (the port from 1 to 65535).

    >>> parse_address("127.0.0.1:8765")
    ('127.0.0.1', 8765)
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--http {address!r}: give HOST:PORT, e.g. 127.0.0.1:8765")
    return host, int(port)


async def run_proxy(
    config: ProxyConfig,
    store: Store,
    *,
    http: tuple[str, int] | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Start the upstream, refuse to serve when it lists undeclared tools that may change the world
    (:class:`ProxyRefused`, one line each), then serve until the client goes (stdio) or the process is stopped."""
    if config.task.by == "header" and http is None:
        raise ConfigError('[task] by = "header" needs the HTTP transport (--http HOST:PORT)')
    proxy = GuardedProxy(config, store)
    refused: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(proxy.link.hold)
        try:
            refused = await proxy.refusals()
            if not refused:
                await _serve(build_server(proxy), http, ready)
        finally:
            proxy.link.close()
            group.cancel_scope.cancel()
    if refused:
        raise ProxyRefused("\n".join(refused))


async def _serve(server: Server[Any], http: tuple[str, int] | None, ready: Callable[[str], None] | None) -> None:
    if http is not None:
        await _serve_http(server, http, ready)
        return
    if ready is not None:
        ready("stdio")
    async with stdio_server() as (read, write):
        await server.run(ScreenedStream(read), write, server.create_initialization_options())


async def _serve_http(server: Server[Any], address: tuple[str, int], ready: Callable[[str], None] | None) -> None:
    import uvicorn

    host, port = address
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    if ready is not None:
        ready(f"http://{host}:{port}/mcp")
    await uvicorn.Server(config).serve()
