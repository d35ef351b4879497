"""``loopguard prune``: remove finished history older than a retention policy allows, in short batches (R22).

See :mod:`agents_loopguard.ops.retention` for what is kept and what goes; ``--dry-run`` counts what would go.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..ops import retention
from .base import JsonFlag, app, emit, json_flag, store


@app.command("prune")
def prune_cmd(
    older_than: Annotated[
        float, typer.Option("--older-than", min=0, help="Days: ended tasks last updated longer ago go (default 30).")
    ] = 30.0,
    idempotency_window: Annotated[
        float | None,
        typer.Option(
            "--idempotency-window",
            min=0,
            help="Days a settled operation is kept (default 3x --older-than; never shorter than it).",
        ),
    ] = None,
    batch: Annotated[int, typer.Option(min=1, help="Tasks per batch (one short transaction each).")] = 500,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", metavar="", help="Count what would go; change nothing.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Remove ended tasks older than --older-than days (never running or paused ones, nor unknown writes)."""
    json_flag(as_json)
    policy = retention.RetentionPolicy(older_than_days=older_than, idempotency_days=idempotency_window)
    done = retention.prune(store(reading=dry_run), policy, batch=batch, dry_run=dry_run)

    def human() -> None:
        removed = {kind: n for kind, n in done["removed"].items() if n}
        verb = "would remove" if dry_run else "removed"
        listed = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in removed.items()) or "nothing"
        typer.echo(
            f"{verb} {listed} (tasks ended before {done['finished_before']}, settled operations before "
            f"{done['settled_before']})" + ("" if dry_run else f" in {done['batches']} batches")
        )

    emit(done, human)
