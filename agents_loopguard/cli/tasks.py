"""``loopguard tasks``, ``show`` and ``record``: the tasks of the store, one task, its recovery record."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .. import views
from ..ops import operator
from .base import JsonFlag, app, emit, json_flag, listed_by, store


@app.command("tasks")
def list_tasks(
    status: Annotated[
        str | None, typer.Option(help=f"Only tasks with this status ({', '.join(operator.TASK_STATUSES)}).")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=0, help="At most this many tasks (newest first).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List tasks, newest first: status, reason, counters against limits, revision, stop mark."""
    json_flag(as_json)
    rows = operator.task_rows(store(reading=True), status=status, limit=limit)

    def human() -> None:
        if not rows:
            typer.echo("no tasks in this store" + (f" with status {status}" if status else ""))
            return
        costs = any(r["limits"]["cost"] is not None for r in rows)
        headers = ["task", "status", "reason", "turns", "tools", *(["cost"] if costs else []), "revision"]
        views.table(
            None,
            [*headers, "stop mark", "updated"],
            [
                [
                    r["task_id"],
                    r["status"],
                    r["reason"],
                    views.of(r, "models"),
                    views.of(r, "tools"),
                    *([views.of(r, "cost")] if costs else []),
                    r["revision"],
                    r["stop_mark"],
                    r["updated_at"],
                ]
                for r in rows
            ],
            free=("task", "reason", "stop mark"),
        )

    emit(rows, human)


@app.command("show")
def show(
    task_id: str,
    limit: Annotated[int | None, typer.Option(min=0, help="Only the last N steps of the timeline.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show one task: counters against limits, timeline, operations, pauses, transitions, next actions."""
    json_flag(as_json)
    with listed_by("tasks"):
        view = operator.task_view(store(reading=True), task_id, limit=limit)

    def human() -> None:
        views.show_summary(view)
        views.show_tables(view)
        typer.echo(f"\nallowed next actions: {', '.join(view['allowed_next_actions']) or '-'}")
        for step in view.get("next_steps", []):
            typer.echo(f"  - {step}")

    emit(view, human)


@app.command("record")
def record(task_id: str, as_json: JsonFlag = False) -> None:
    """Export the task's recovery record as JSON."""
    json_flag(as_json)
    with listed_by("tasks"):
        data = operator.task_record(store(reading=True), task_id)
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
