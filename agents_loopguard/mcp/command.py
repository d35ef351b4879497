"""The ``loopguard mcp`` command's body (cli.py only registers it): open the store, read the configuration, serve.

Its messages go to stderr: over stdio, stdout is the MCP wire.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import anyio

from ..store.base import Store
from .config import load_config
from .serve import parse_address, run_proxy

__all__ = ["run_command"]


def _store(url: str | None) -> Store:
    """The store every ``loopguard`` command reads (``--db``, ``$LOOPGUARD_DATABASE_URL``, or the default file),
    created when it does not exist yet: the proxy records tasks there."""
    if url is None:
        from ..store.defaults import default_store

        return default_store()
    from ..store.sql import SQLStore

    return SQLStore(url)


def run_command(config_path: Path, *, http: str | None, url: str | None, echo: Callable[[str], None]) -> None:
    """Validate, then serve until the client goes (stdio) or the process is stopped (HTTP)."""
    config = load_config(config_path)
    address = parse_address(http) if http is not None else None
    store = _store(url)

    def ready(where: str) -> None:
        print(f"loopguard mcp: serving {config.upstream.name!r} over {where}", file=sys.stderr, flush=True)

    anyio.run(lambda: run_proxy(config, store, http=address, ready=ready))
