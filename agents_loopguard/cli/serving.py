"""``loopguard demo``, ``serve`` and ``migrate``: run the demo, serve the API and console, migrate the store."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from ..values.errors import InputError
from .base import JsonFlag, app, emit, json_flag, state


@app.command("demo")
def demo(
    model: Annotated[
        str | None, typer.Option(help="Run on this real model (needs OPENAI_API_KEY) instead of the scripted one.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run the demo: an agent looping on a search, and a payment whose response is lost, on this store."""
    import os

    from ..demo import run_demo

    json_flag(as_json)
    if model and not os.environ.get("OPENAI_API_KEY"):
        raise InputError("--model needs OPENAI_API_KEY; without it the demo runs its scripted model")
    if state.json:
        outcomes = run_demo(db=state.url, model=model, out=lambda line: None)
        emit([o.record().to_dict() for o in outcomes], lambda: None)
    else:
        run_demo(db=state.url, model=model)


@app.command("serve")
def serve_cmd(
    host: Annotated[str, typer.Option(help="Address to listen on; other than loopback, tokens are required.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8765,
    secure_cookies: Annotated[
        bool, typer.Option(metavar="", help="Send the console's session cookie over HTTPS only (behind TLS).")
    ] = False,
    log_level: Annotated[str, typer.Option(help="Uvicorn's log level.")] = "info",
    probes: Annotated[
        str | None,
        typer.Option(help="The registry of the writes' probes, package.module:attribute (default: $LOOPGUARD_PROBES)."),
    ] = None,
) -> None:
    """Serve the HTTP API (/api/v1) and the operators' web console over this store.

    Tokens come from LOOPGUARD_SERVER_TOKENS: "name:operator:secret" and "name:workflow:secret:flow,flow" entries.

    Without tokens it listens on loopback only, with a one-run operator token in a file only you can read.

    Needs the server extra of agents-loopguard (FastAPI, Uvicorn, Jinja2, prometheus-client).
    """
    try:
        from ..server.serve import serve
    except ImportError as exc:
        raise InputError(
            f"`loopguard serve` needs the server extra: pip install 'agents-loopguard[server]' ({exc})"
        ) from None
    serve(
        url=state.url,
        host=host,
        port=port,
        secure_cookies=secure_cookies,
        log_level=log_level,
        echo=typer.echo,
        probes=probes,
    )


@app.command("migrate")
def migrate_cmd(
    dry_run: Annotated[bool, typer.Option("--dry-run", metavar="", help="Print the SQL and change nothing.")] = False,
) -> None:
    """Bring the store's schema to this agents_loopguard's version (stop the store's workers first)."""
    from ..store.sql.migrate import migrate

    done = migrate(state.url, dry_run=dry_run)
    if state.json:
        typer.echo(json.dumps(asdict(done)))
    elif dry_run:
        typer.echo(done.sql or f"-- {done.store} is at schema version {done.to_version}: nothing to migrate")
    elif done.revisions:
        typer.echo(f"migrated {done.store} from schema version {done.from_version} to {done.to_version}")
    else:
        typer.echo(f"{done.store} is at schema version {done.to_version}: nothing to migrate")
