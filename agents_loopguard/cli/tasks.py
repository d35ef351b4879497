"""``loopguard tasks``, ``show``, ``record``, ``operations`` and ``transitions``: the tasks of the store a page at a
time, one task, its recovery record, the ledger and the operators' transitions.

Every list is one page (``--limit``, 20 by default) read through the store's indexes; under it the command prints
the command of the next page (``--cursor``), and ``--json`` answers ``{"tasks": [...], "next": cursor, ...}``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .. import views
from ..ops import operator, pages
from .base import JsonFlag, app, emit, json_flag, listed_by, next_page, store

Limit = Annotated[int, typer.Option(min=1, max=pages.MAX_PAGE, help="Rows on the page.")]
Cursor = Annotated[str | None, typer.Option(help="The page after the one whose `next` this is.")]
After = Annotated[
    str | None, typer.Option(help="Only those updated after this time (2025-05-01, 2025-05-01T10:00Z) or age (7d).")
]
Before = Annotated[str | None, typer.Option(help="Only those updated before this time or age (30d: older than).")]


def _task_cells(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    costs = any(r["limits"]["cost"] is not None for r in rows)
    families = len({r["family"] for r in rows}) > 1  # a column only when it tells the rows apart
    headers = ["task", "status", "reason", *(["family"] if families else []), "turns", "tools"]
    headers += [*(["cost"] if costs else []), "revision"]
    cells = [
        [
            *(r["task_id"], r["status"], r["reason"], *([r["family"]] if families else [])),
            *(views.of(r, "models"), views.of(r, "tools")),
            *([views.of(r, "cost")] if costs else []),
            *(r["revision"], r["stop_mark"], r["updated_at"]),
        ]
        for r in rows
    ]
    return [*headers, "stop mark", "updated"], cells


@app.command("tasks")
def list_tasks(
    status: Annotated[
        str | None, typer.Option(help=f"Only tasks with this status ({', '.join(pages.TASK_STATUSES)}).")
    ] = None,
    reason: Annotated[str | None, typer.Option(help="Only tasks whose outcome has this reason.")] = None,
    family: Annotated[str | None, typer.Option(help="Only tasks of this family.")] = None,
    prefix: Annotated[str | None, typer.Option(help="Only task ids that start with this text.")] = None,
    updated_after: After = None,
    updated_before: Before = None,
    limit: Limit = 20,
    cursor: Cursor = None,
    as_json: JsonFlag = False,
) -> None:
    """List tasks, newest first, a page at a time: status, reason, family, counters against limits, stop mark."""
    json_flag(as_json)
    page = pages.task_page(
        store(reading=True),
        status=status,
        reason=reason,
        family=family,
        prefix=prefix,
        updated_after=updated_after,
        updated_before=updated_before,
        cursor=cursor,
        limit=limit,
    )

    def human() -> None:
        if not page["tasks"]:
            typer.echo("no tasks in this store" + (f" with status {status}" if status else "") + _more(cursor))
            return
        headers, cells = _task_cells(page["tasks"])
        views.table(None, headers, cells, free=("task", "reason", "stop mark"))
        next_page(page["next"])

    emit(page, human)


def _more(cursor: str | None) -> str:
    return " after that page" if cursor else ""


@app.command("show")
def show(
    task_id: str,
    limit: Annotated[int | None, typer.Option(min=0, help="The last N steps of the timeline (default 50).")] = None,
    cursor: Annotated[str | None, typer.Option(help="The earlier steps: the timeline's `next` cursor.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show one task: counters against limits, timeline, operations, pauses, transitions, next actions."""
    json_flag(as_json)
    with listed_by("tasks"):
        view = operator.task_view(store(reading=True), task_id, limit=limit, cursor=cursor)

    def human() -> None:
        views.show_summary(view)
        views.show_tables(view)
        if view["timeline_next"]:
            typer.echo(f"earlier steps: --cursor {view['timeline_next']}")
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


@app.command("operations")
def list_operations(
    state: Annotated[str | None, typer.Option(help="Only this state (unknown, committed, not_committed).")] = None,
    task: Annotated[str | None, typer.Option(help="Only the operations of this task.")] = None,
    prefix: Annotated[str | None, typer.Option(help="Only operation ids that start with this text.")] = None,
    updated_after: After = None,
    updated_before: Before = None,
    limit: Limit = 20,
    cursor: Cursor = None,
    as_json: JsonFlag = False,
) -> None:
    """List the ledger's operations, newest first (--state unknown: the writes to reconcile)."""
    json_flag(as_json)
    page = pages.operation_page(
        store(reading=True),
        state=state,
        task_id=task,
        prefix=prefix,
        updated_after=updated_after,
        updated_before=updated_before,
        cursor=cursor,
        limit=limit,
    )

    def human() -> None:
        if not page["operations"]:
            typer.echo("no operations in this store" + (f" in state {state}" if state else "") + _more(cursor))
            return
        views.table(
            None,
            ["operation", "task", "tool", "state", "attempts", "result"],
            [
                [*(o["operation_id"], o["task_id"], o["tool"], o["state"], o["attempts"]), views.short(o["result"])]
                for o in page["operations"]
            ],
            free=("operation", "task", "result"),
        )
        next_page(page["next"])

    emit(page, human)


@app.command("transitions")
def list_transitions(
    task: Annotated[str | None, typer.Option(help="Only the transitions of this task.")] = None,
    kind: Annotated[
        str | None, typer.Option(help="Only this kind (resume, recover, reconcile, confirm, correct, stop).")
    ] = None,
    limit: Limit = 20,
    cursor: Cursor = None,
    as_json: JsonFlag = False,
) -> None:
    """List the operators' recorded transitions (who, why, when), newest first."""
    json_flag(as_json)
    page = pages.transition_page(store(reading=True), task_id=task, kind=kind, cursor=cursor, limit=limit)

    def human() -> None:
        if not page["transitions"]:
            typer.echo("no transitions in this store" + _more(cursor))
            return
        views.table(
            None,
            ["task", "kind", "who", "why", "operation", "at"],
            [
                [t["task_id"], t["kind"], t["who"], t["why"], t.get("operation_id"), t["at"]]
                for t in page["transitions"]
            ],
            free=("task", "who", "why", "operation"),
        )
        next_page(page["next"])

    emit(page, human)
