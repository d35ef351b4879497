"""``loopguard pauses``, ``pause``, ``approve`` and ``reject``: approval pauses and the decisions on them."""

from __future__ import annotations

from typing import Annotated

import typer

from .. import views
from ..ops import operator, pages, webhooks
from .base import JsonFlag, app, emit, json_flag, listed_by, next_page, store

DRAIN = 30.0
"""Seconds ``approve`` and ``reject`` wait at most for the decision's webhook deliveries (its retries) to end."""


@app.command("pause")
def show_pause(pause_id: str, as_json: JsonFlag = False) -> None:
    """Show a pause: its pending calls, the counters stored with it, its status, whether its digest matches."""
    json_flag(as_json)
    with listed_by("pauses"):
        view = operator.pause_view(store(reading=True), pause_id)

    def human() -> None:
        views.pause_lines(view)
        views.table(
            None,
            ["call", "tool", "operation", "arguments", "decision"],
            [
                [c["call_id"], c["tool"], c["operation_id"], views.short(c["arguments"], 80), c["decision"]]
                for c in view["pending_calls"]
            ],
            free=("arguments",),
        )
        views.call_notes([view])

    emit(view, human)


@app.command("pauses")
def list_pauses(
    status: Annotated[
        str, typer.Option(help="Pauses in this state: pending (waiting for a decision), decided, resumed.")
    ] = "pending",
    task: Annotated[str | None, typer.Option(help="Only the pauses of this task.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=pages.MAX_PAGE, help="Rows on the page.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="The page after the one whose `next` this is.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the pauses waiting for a decision (oldest first, a page at a time), with what their task has left."""
    json_flag(as_json)
    page = pages.pause_page(store(reading=True), status=status, task_id=task, cursor=cursor, limit=limit)
    waiting = page["pauses"]

    def human() -> None:
        if not waiting:
            typer.echo("no pause waits for a decision" if status == "pending" else f"no {status} pause")
            return
        views.table(
            None,
            ["pause", "task", "calls", "arguments (redacted)", "turns left", "tools left", "digest", "created"],
            [
                [
                    v["pause_id"],
                    v["task_id"],
                    ", ".join(f"{c['call_id']}:{c['tool']}" for c in v["pending_calls"]),
                    "; ".join(views.short(c["arguments"], 80) or "-" for c in v["pending_calls"]),
                    (v["task"] or v)["left"]["models"],
                    (v["task"] or v)["left"]["tools"],
                    "ok" if v["digest_ok"] else "MISMATCH",
                    v["created_at"],
                ]
                for v in waiting
            ],
            free=("pause", "task", "calls", "arguments (redacted)"),
        )
        views.call_notes(waiting)
        next_page(page["next"])

    emit(page, human)


def _decide(pause_id: str, who: str, why: str, approve: list[str], reject: list[str], verb: str | None) -> None:
    with listed_by("pauses"):
        done = operator.decide_pause(
            store(),
            pause_id,
            who=who,
            why=why,
            approve=approve,
            reject=reject,
            approve_all=verb == "approve",
            reject_all=verb == "reject",
        )
    emit(done, lambda: typer.echo(done["message"]))
    webhooks.drain_all(timeout=DRAIN)  # the decision's notice ($LOOPGUARD_DECISION_WEBHOOK) before the command exits


@app.command("approve")
def approve(
    pause_id: str,
    who: Annotated[str, typer.Option(help="Who approves.")],
    call: Annotated[
        list[str] | None, typer.Option(metavar="CALL_ID", help="Approve only this call id (repeatable).")
    ] = None,
    reject_call: Annotated[
        list[str] | None, typer.Option("--reject", metavar="CALL_ID", help="Reject this call id (repeatable).")
    ] = None,
    why: Annotated[str, typer.Option(help="Why.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Approve a pause's pending calls (all of them, or those named with --call; --reject names the others)."""
    json_flag(as_json)
    _decide(pause_id, who, why, call or [], reject_call or [], None if (call or reject_call) else "approve")


@app.command("reject")
def reject(
    pause_id: str,
    who: Annotated[str, typer.Option(help="Who rejects.")],
    call: Annotated[
        list[str] | None, typer.Option(metavar="CALL_ID", help="Reject only this call id (repeatable).")
    ] = None,
    why: Annotated[str, typer.Option(help="Why.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Reject a pause's pending calls (all of them, or those named with --call)."""
    json_flag(as_json)
    _decide(pause_id, who, why, [], call or [], None if call else "reject")
