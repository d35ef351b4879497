"""``loopguard stop``, ``reconcile`` and ``recover``: an operator's actions on a task and on the ledger."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from ..ops import operator
from ..ops.probes import PROBES_ENV, load_probes, probe_operation
from ..store.base import OperationState
from ..values.errors import InputError
from .base import JsonFlag, app, emit, json_flag, listed_by, operator_name, store


@app.command("stop")
def stop(
    task_id: str,
    reason: Annotated[str, typer.Option(help="Why the task is stopped.")] = "operator",
    who: Annotated[str | None, typer.Option(help="Who stops it (default: your user name).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Set the task's stop mark: every later model call and tool execution, by any worker, is refused."""
    json_flag(as_json)
    with listed_by("tasks"):
        done = operator.stop_task(store(), task_id, reason=reason, who=who or operator_name())

    def show() -> None:
        typer.echo(done["message"])
        for run in done["hooks"]:  # the stop hooks ran once, here, because this call set the mark
            typer.echo(f"stop hook {run['hook']}: {'done' if run['ok'] else 'FAILED: ' + str(run['error'])}")

    emit(done, show)


@app.command("reconcile")
def reconcile_cmd(
    operation_id: str,
    answer: Annotated[
        OperationState | None, typer.Argument(help="What the receiving system says (none with --probe).")
    ] = None,
    who: Annotated[str | None, typer.Option(help="Who queried the receiver (default with --probe: your name).")] = None,
    why: Annotated[str, typer.Option(help="Evidence: what the receiver answered.")] = "",
    result: Annotated[str | None, typer.Option(help="The receiver's result, as JSON (for committed).")] = None,
    correct: Annotated[
        bool,
        typer.Option("--correct", metavar="", help="Correct the ledger: the receiver contradicts its known state."),
    ] = False,
    probe: Annotated[
        bool, typer.Option("--probe", metavar="", help="Ask the receiver with the write's own probe instead.")
    ] = False,
    probes: Annotated[
        str | None,
        typer.Option(help=f"The registry of probes, package.module:attribute (default: ${PROBES_ENV})."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Record the receiving system's answer for a write whose result is unknown (or confirm or correct a known one);
    with --probe, the write's own probe asks the receiver and its answer is recorded."""
    json_flag(as_json)
    if probe:
        if answer is not None or result is not None or correct or why:
            raise InputError("--probe records the probe's own answer: give no answer, --why, --result or --correct")
        done = probe_operation(store(), operation_id, load_probes(probes), who=who or operator_name())
    else:
        if answer is None or not who:
            raise InputError("give the receiver's answer and --who (or ask the receiver with --probe)")
        try:
            parsed = json.loads(result) if result is not None else None
        except json.JSONDecodeError as exc:
            raise InputError(f"--result is not JSON: {exc}") from None
        done = operator.reconcile_operation(
            store(), operation_id, answer, who=who, why=why, result=parsed, correct=correct
        )
    emit(done, lambda: typer.echo(f"{done['message']}; next: {', '.join(done['allowed_next_actions'])}"))


@app.command("recover")
def recover_cmd(
    task_id: str,
    who: Annotated[str, typer.Option(help="Who decides.")],
    why: Annotated[str, typer.Option(help="The evidence for continuing.")],
    more_turns: Annotated[int, typer.Option(min=0, help="Model turns to add to the limit.")] = 0,
    more_tools: Annotated[int, typer.Option(min=0, help="Tool executions to add to the limit.")] = 0,
    more_cost: Annotated[float, typer.Option(min=0, help="Cost to add to the cost limit.")] = 0.0,
    more_input_tokens: Annotated[int, typer.Option(min=0, help="Input tokens to add to that limit.")] = 0,
    more_output_tokens: Annotated[int, typer.Option(min=0, help="Output tokens to add to that limit.")] = 0,
    more_total_tokens: Annotated[int, typer.Option(min=0, help="Tokens to add to the total token limit.")] = 0,
    deadline_in: Annotated[
        float | None, typer.Option(min=0, help="A new deadline, this many seconds from now (replaces the old one).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Reopen a stopped or partial task by a recorded decision, optionally extending its limits; counters stay."""
    json_flag(as_json)
    more: dict[str, Any] = {
        "model_turns": more_turns,
        "tool_executions": more_tools,
        "cost": more_cost,
        "input_tokens": more_input_tokens,
        "output_tokens": more_output_tokens,
        "total_tokens": more_total_tokens,
    }
    delta = {k: v for k, v in more.items() if v}
    if deadline_in is not None:
        delta["deadline"] = time.time() + deadline_in
    with listed_by("tasks"):
        done = operator.recover_task(store(), task_id, who=who, why=why, extend=delta)
    emit(done, lambda: typer.echo(done["message"]))
