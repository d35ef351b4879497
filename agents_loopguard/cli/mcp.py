"""``loopguard mcp``: serve an MCP server's tools to any MCP client, every ``tools/call`` through the guard (see
docs/mcp.md). The proxy itself is :mod:`agents_loopguard.mcp`; this module only registers the command and imports
it when the command runs (it needs the ``mcp`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..values.errors import InputError
from .base import app, state


@app.command("mcp")
def mcp_cmd(
    config: Annotated[Path, typer.Argument(help="The proxy's TOML configuration (upstream, task, budget, tools).")],
    http: Annotated[str | None, typer.Option(help="Serve streamable HTTP on HOST:PORT instead of stdio.")] = None,
) -> None:
    """Serve an MCP server's tools to any MCP client, every tools/call through the guard (see docs/mcp.md).

    Needs the mcp extra of agents-loopguard (the mcp package, 2.x).
    """
    try:
        from ..mcp.command import run_command
    except ImportError as exc:
        raise InputError(f"`loopguard mcp` needs the mcp extra: pip install 'agents-loopguard[mcp]' ({exc})") from None
    run_command(config, http=http, url=state.url, echo=typer.echo)
