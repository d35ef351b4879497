"""``loopguard label`` and ``loopguard tune``: an operator's judgement of a run, and the loop rules' thresholds
derived from the stored traces of finished tasks (:mod:`agents_loopguard.ops.tuning`, docs/efficacy.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..ops import tuning
from .base import JsonFlag, app, emit, json_flag, listed_by, store


@app.command("label")
def label_cmd(
    task_id: str,
    label: Annotated[str, typer.Argument(help="correct (legitimate work to let run) or loop (a loop to cut).")],
    who: Annotated[str, typer.Option(help="Who judges the run.")],
    why: Annotated[str, typer.Option(help="Why.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Label a task for `loopguard tune`: correct (legitimate work) or loop."""
    json_flag(as_json)
    with listed_by("tasks"):
        done = tuning.label_task(store(), task_id, label, who=who, why=why)
    emit(done, lambda: typer.echo(f"task {task_id}: labelled {label} by {done['who']}"))


@app.command("tune")
def tune_cmd(
    family: Annotated[str | None, typer.Option(help="Only this task family (see `loopguard tasks --family`).")] = None,
    since: Annotated[str | None, typer.Option(help="Only tasks finished since (ISO 8601, or 7d, 12h).")] = None,
    until: Annotated[str | None, typer.Option(help="Only tasks finished until (ISO 8601, or 7d, 12h).")] = None,
    correct_only: Annotated[
        bool, typer.Option("--correct-only", metavar="", help="Only tasks labelled correct are legitimate work.")
    ] = False,
    allowed_false_stops: Annotated[int, typer.Option(min=0, help="False stops a recommendation may cause.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Replay finished tasks under candidate thresholds: each rule's false stops and earlier cuts, and a Policy."""
    json_flag(as_json)
    since_at, until_at = (tuning.parse_when(t) if t else None for t in (since, until))
    report = tuning.tune(
        store(reading=True),
        family=family,
        since=since_at,
        until=until_at,
        correct_only=correct_only,
        allowed_false_stops=allowed_false_stops,
    )
    emit(report, lambda: typer.echo(tuning.render(report)))
