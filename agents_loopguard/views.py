"""How the ``loopguard`` command prints the operator views for a person: one-line summaries and tables (plain text
when piped, Rich tables on a terminal). The data is :mod:`agents_loopguard.ops.operator`'s; ``--json`` prints it as is.

>>> short({"order": 42, "note": "x" * 80}, width=20)
'{"order":42,"note...'
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "call_notes",
    "console",
    "of",
    "one_line",
    "pause_lines",
    "short",
    "show_summary",
    "show_tables",
    "table",
]


def console() -> Console:
    """Rich's console for standard output: colour and wrapping on a terminal, plain lines when piped."""
    found = Console(highlight=False, soft_wrap=True)
    if not found.is_terminal:  # piped: no colour (Rich's default) and no wrapping at an imagined width
        found = Console(highlight=False, soft_wrap=True, width=10_000)
    return found


def table(
    title: str | None, headers: Sequence[str], rows: Sequence[Sequence[Any]], *, free: Sequence[str] = ()
) -> None:
    """Print a table; on a terminal too narrow for it, the ``free`` text columns fold and the others stay whole."""
    shown = console()
    if title:
        typer.echo()
    grid = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD if shown.is_terminal else None,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        show_edge=False,
        header_style="bold" if shown.is_terminal else "",
    )
    for header in headers:
        if header in free:
            grid.add_column(header, overflow="fold")
        else:
            grid.add_column(header, overflow="ellipsis", no_wrap=True)
    for row in rows:
        grid.add_row(*(Text("-" if cell is None else str(cell)) for cell in row))  # text, never Rich markup
    if shown.is_terminal:
        shown.print(grid)
        return
    with shown.capture() as captured:
        shown.print(grid)
    typer.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def short(value: Any, width: int = 48) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def of(row: dict[str, Any], key: str) -> str:
    return f"{row['used'][key]:g}/{row['limits'][key]:g}" if row["limits"][key] is not None else "-"


def one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def show_summary(view: dict[str, Any]) -> None:
    task = view["task"]
    used, limits, left = task["used"], task["limits"], task["left"]
    outcome = task["outcome"] or {}
    typer.echo(f"task {task['task_id']}: {task['status']}" + (f" / {outcome['reason']}" if outcome else ""))
    if outcome.get("detail"):
        typer.echo(f"  {outcome['detail']}")
    if view["record_error"]:
        typer.echo(f"  stored record refused: {view['record_error']}")
    typer.echo(f"  model turns      {used['models']} of {limits['models']} ({left['models']} left)")
    typer.echo(f"  tool executions  {used['tools']} of {limits['tools']} ({left['tools']} left)")
    if limits["cost"] is not None:
        typer.echo(f"  cost             {used['cost']:.6f} of {limits['cost']:.6f} ({left['cost']:.6f} left)")
    if task["deadline"] is not None:
        typer.echo(f"  deadline         {task['deadline']}")
    typer.echo(f"  revision         {task['revision']} (stalled {task['stalled']})")
    typer.echo(f"  stop mark        {task['stop_mark'] or '-'}")
    typer.echo(f"  created          {task['created_at'] or '-'}   updated {task['updated_at'] or '-'}")
    shadow = Counter(
        s["result_class"].removeprefix("shadow:") for s in view["timeline"] if s["result_class"].startswith("shadow:")
    )
    if shadow:  # shadow mode: the loop rules' would-be verdicts (nothing was refused for them)
        listed = ", ".join(f"{reason} {count}" for reason, count in sorted(shadow.items()))
        typer.echo(f"  shadow mode      would have stopped the task: {listed} (see the timeline)")


def show_tables(view: dict[str, Any]) -> None:
    shown, total = len(view["timeline"]), view["timeline_total"]
    table(
        "timeline" + (f" (the last {shown} of {total} steps)" if shown < total else ""),
        ["seq", "at", "kind", "tool", "arguments", "result", "turns", "tools", "revision", "operation", "state"],
        [
            [
                *(s["seq"], s["at"], s["kind"], s["tool"], short(s["arguments"]), s["result_class"]),
                *(s["models"], s["tools"], s["revision"], s["operation_id"], s["operation_state"]),
            ]
            for s in view["timeline"]
        ],
        free=("arguments", "result", "operation"),
    )
    if view["operations"]:
        table(
            "operations",
            ["operation", "tool", "state", "attempts", "result", "updated"],
            [
                [o["operation_id"], o["tool"], o["state"], o["attempts"], short(o["result"]), o["updated_at"]]
                for o in view["operations"]
            ],
            free=("operation", "result"),
        )
    if view["pauses"]:
        table(
            "pauses",
            ["pause", "status", "calls", "decisions", "decided by", "why", "decided", "resumed by", "created"],
            [
                [
                    p["pause_id"],
                    p["status"] + ("" if p["digest_ok"] else " (DIGEST MISMATCH)"),
                    ", ".join(f"{c['call_id']}:{c['tool']}" for c in p["pending_calls"]),
                    ", ".join(f"{k}={v}" for k, v in p["decisions"].items()) or None,
                    *(p["decided_by"], p["decided_why"] or None, p["decided_at"], p["resumed_by"], p["created_at"]),
                ]
                for p in view["pauses"]
            ],
            free=("calls", "decisions", "why"),
        )
        call_notes(view["pauses"])
    if view["transitions"]:
        table(
            "transitions",
            ["kind", "who", "why", "pause", "from", "extension", "at"],
            [
                [
                    t["kind"],
                    t["who"],
                    t["why"],
                    t["pause_id"],
                    (t["from_outcome"] or {}).get("reason"),
                    short(t["budget_delta"]) if t["budget_delta"] else None,
                    t["at"],
                ]
                for t in view["transitions"]
            ],
            free=("who", "why", "extension"),
        )


def call_notes(pauses: list[dict[str, Any]]) -> None:
    """Say under a pending pause's calls which of them would not send: their operation is already committed (the
    stored result comes back) or already unknown (the resume ends needing reconciliation)."""
    for view in pauses:
        for call in view["pending_calls"]:
            for note in (call["already_committed"], call["already_unknown"]):
                if note and view["status"] == "pending":
                    typer.echo(f"  note: {view['pause_id']} call {call['call_id']}: {note}")


def pause_lines(view: dict[str, Any]) -> None:
    typer.echo(
        f"pause {view['pause_id']} of task {view['task_id']}: {view['status']}"
        + ("" if view["digest_ok"] else "  (DIGEST MISMATCH: refused)")
    )
    used, limits = view["used"], view["limits"]
    typer.echo(
        f"  stored with: {used['models']}/{limits['models']} model turns, "
        f"{used['tools']}/{limits['tools']} tool executions"
    )
    if view["decided_by"]:
        note = f": {view['decided_why']}" if view["decided_why"] else " (no note)"
        typer.echo(f"  decided by {view['decided_by']} at {view['decided_at'] or '-'}{note}")
    if view["resumed_by"]:
        typer.echo(f"  resumed by {view['resumed_by']} at {view['resumed_at'] or '-'}")
