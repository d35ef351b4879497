"""The ``loopguard`` operator command: look at tasks, stop them, reconcile writes, decide pauses, export records.

Every command reads the store named by ``--db`` (or ``LOOPGUARD_DATABASE_URL``, or the default SQLite file), prints
readable tables for people and ``--json`` for scripts. Exit codes: 0 done, 1 refused by the task's state, 2 bad input
(unknown task, pause or operation; a wrong URL; an old schema).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from enum import Enum
from typing import Annotated, Any, NoReturn

import typer
from sqlalchemy.exc import SQLAlchemyError

from .approvals import check_pause, decide
from .errors import exit_code
from .outcome import RecordError, RecoveryRecord, allowed_next_actions
from .recovery import RecoveryError, reconcile, recover
from .store.base import OperationState, Store, StoreError, TaskSnapshot

__all__ = ["app", "main"]

app = typer.Typer(
    name="loopguard",
    help="Look at and act on guarded agent tasks: stop, reconcile, approve, recover, export.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class _State:
    url: str | None = None
    json: bool = False
    store: Store | None = None


_state = _State()


@app.callback()
def _options(
    db: Annotated[
        str | None,
        typer.Option(
            "--db", envvar="LOOPGUARD_DATABASE_URL", help="Store URL (sqlite:///path or postgresql+psycopg://)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")] = False,
) -> None:
    _state.url, _state.json, _state.store = db, as_json, None


# --- plumbing ---------------------------------------------------------------------------------------------


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"loopguard: {message}", err=True)
    raise typer.Exit(code)


def _store() -> Store:
    if _state.store is None:
        try:
            from .store.sql import SQLStore
        except ImportError as exc:  # pragma: no cover - the SQL store ships with the package
            _fail(f"the SQL store is unavailable: {exc}")
        try:
            _state.store = SQLStore(_state.url)
        except StoreError as exc:
            _fail(str(exc))
        except Exception as exc:  # a malformed URL, a missing driver, a server that refuses: say which
            _fail(f"cannot open the store {_state.url or '(default)'!r}: {type(exc).__name__}: {exc}")
    return _state.store


def _task(task_id: str) -> TaskSnapshot:
    task = _store().task(task_id)
    if task is None:
        _fail(f"no task {task_id!r} in this store; `loopguard tasks` lists them")
    return task


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _emit_json(value: Any) -> None:
    typer.echo(json.dumps(_plain(value), indent=2, sort_keys=False, default=str))


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    typer.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _short(value: Any, width: int = 40) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _next_actions(task: TaskSnapshot) -> list[str]:
    if task.outcome is None:
        return ["stop"] if task.status == "running" else []
    try:
        record = RecoveryRecord.from_json(task.outcome)
    except RecordError as exc:
        _fail(f"task {task.task_id!r}: {exc}", 1)
    return [str(a) for a in allowed_next_actions(record.status, record.reason)]


def _task_row(task: TaskSnapshot) -> dict[str, Any]:
    reason = (task.outcome or {}).get("reason")
    return {
        "task_id": task.task_id,
        "status": task.status,
        "reason": reason,
        "models": f"{task.used.models}/{task.budget.model_turns}",
        "tools": f"{task.used.tools}/{task.budget.tool_executions}",
        "revision": task.revision,
        "stop_mark": task.stop_reason,
        "updated": _when(task.updated_at),
    }


# --- commands ---------------------------------------------------------------------------------------------


@app.command("tasks")
def list_tasks() -> None:
    """List every task with its status and counters against limits."""
    rows = [_task_row(t) for t in _store().tasks()]
    if _state.json:
        _emit_json(rows)
        return
    if not rows:
        typer.echo("no tasks in this store")
        return
    _table(list(rows[0]), [list(r.values()) for r in rows])


@app.command("show")
def show(task_id: str) -> None:
    """Show one task: counters against limits, timeline, operations, pauses, transitions, next actions."""
    task = _task(task_id)
    store = _store()
    trace = store.trace(task_id)
    operations = store.operations(task_id)
    pauses = store.pauses(task_id)
    transitions = store.transitions(task_id)
    actions = _next_actions(task)
    if _state.json:
        _emit_json(
            {
                "task": {**_task_row(task), "budget": task.budget, "used": task.used, "outcome": task.outcome},
                "timeline": trace,
                "operations": operations,
                "pauses": [{k: v for k, v in asdict(p).items() if k != "state"} for p in pauses],
                "transitions": transitions,
                "allowed_next_actions": actions,
            }
        )
        return
    b, u = task.budget, task.used
    typer.echo(f"task {task.task_id}: {task.status}" + (f" / {task.outcome['reason']}" if task.outcome else ""))
    if task.outcome and task.outcome.get("detail"):
        typer.echo(f"  {task.outcome['detail']}")
    typer.echo(f"  model turns      {u.models} of {b.model_turns}")
    typer.echo(f"  tool executions  {u.tools} of {b.tool_executions}")
    if b.cost is not None:
        typer.echo(f"  cost             {u.cost:.6f} of {b.cost:.6f}")
    if b.deadline is not None:
        typer.echo(f"  deadline         {b.deadline}")
    typer.echo(f"  revision         {task.revision} (stalled {task.stalled})")
    typer.echo(f"  stop mark        {task.stop_reason or '-'}")
    typer.echo("\ntimeline")
    _table(
        ["seq", "kind", "tool", "arguments", "result", "models", "tools", "revision", "operation", "state"],
        [
            [
                e.seq,
                e.kind,
                e.tool,
                _short(e.args),
                e.result_class,
                e.models,
                e.tools,
                e.revision,
                e.operation_id,
                e.operation_state,
            ]
            for e in trace
        ],
    )
    if operations:
        typer.echo("\noperations")
        _table(
            ["operation_id", "tool", "state", "attempts", "updated"],
            [[o.operation_id, o.tool, str(o.state), o.attempts, _when(o.updated_at)] for o in operations],
        )
    if pauses:
        typer.echo("\npauses")
        _table(
            ["pause_id", "status", "calls", "decisions", "by", "created"],
            [
                [
                    p.pause_id,
                    p.status,
                    ", ".join(f"{c.get('call_id')}:{c.get('tool')}" for c in p.pending_calls),
                    ", ".join(f"{k}={v}" for k, v in p.decisions.items()) or "-",
                    p.resumed_by or p.decided_by,
                    _when(p.created_at),
                ]
                for p in pauses
            ],
        )
    if transitions:
        typer.echo("\ntransitions")
        _table(
            ["kind", "who", "why", "pause", "from", "extension", "at"],
            [
                [
                    t.kind,
                    t.who,
                    t.why,
                    t.pause_id,
                    (t.from_outcome or {}).get("reason"),
                    json.dumps(t.budget_delta) if t.budget_delta else "-",
                    _when(t.at),
                ]
                for t in transitions
            ],
        )
    typer.echo(f"\nallowed next actions: {', '.join(actions) or '-'}")


@app.command("stop")
def stop(task_id: str, reason: Annotated[str, typer.Option(help="Why the task is stopped.")] = "operator") -> None:
    """Set the task's stop mark: every later model call and tool execution, by any worker, is refused."""
    _task(task_id)
    snapshot = _store().request_stop(task_id, reason)
    in_flight = [o.operation_id for o in _store().operations(task_id) if o.state is OperationState.UNKNOWN]
    if _state.json:
        _emit_json({"task_id": task_id, "stop_mark": snapshot.stop_reason, "writes_in_flight": in_flight})
        return
    typer.echo(f"task {task_id}: stop mark set ({snapshot.stop_reason}); a running worker stops at its next dispatch")
    if in_flight:
        typer.echo(f"writes with an unknown result (reconcile before resuming): {', '.join(in_flight)}")


@app.command("reconcile")
def reconcile_cmd(
    operation_id: str,
    answer: Annotated[OperationState, typer.Argument(help="What the receiving system says.")],
    who: Annotated[str, typer.Option(help="Who queried the receiver.")],
    why: Annotated[str, typer.Option(help="Evidence: what the receiver answered.")] = "",
    result: Annotated[str | None, typer.Option(help="The receiver's result, as JSON (for committed).")] = None,
) -> None:
    """Record the receiving system's answer for a write whose result is unknown."""
    try:
        parsed = json.loads(result) if result is not None else None
    except json.JSONDecodeError as exc:
        _fail(f"--result is not JSON: {exc}")
    try:
        outcome = reconcile(_store(), operation_id, answer, who=who, why=why, result=parsed)
    except RecoveryError as exc:
        _fail(str(exc), exit_code(exc))
    actions = [str(a) for a in outcome.allowed_next_actions]
    reopened = outcome.transition is not None
    if _state.json:
        _emit_json(
            {
                "operation_id": operation_id,
                "state": str(outcome.operation.state),
                "task_id": outcome.operation.task_id,
                "task_reopened": reopened,
                "allowed_next_actions": actions,
            }
        )
        return
    typer.echo(
        f"operation {operation_id}: {outcome.operation.state}; task {outcome.operation.task_id} "
        f"{'reopened' if reopened else 'unchanged'}; next: {', '.join(actions)}"
    )


def _decide(pause_id: str, who: str, why: str, approve: list[str], reject: list[str], all_verb: str | None) -> None:
    try:
        record = decide(
            _store(),
            pause_id,
            who=who,
            why=why,
            approve=approve,
            reject=reject,
            approve_all=all_verb == "approve",
            reject_all=all_verb == "reject",
        )
    except StoreError as exc:
        _fail(str(exc), exit_code(exc))
    if _state.json:
        _emit_json(
            {
                "pause_id": record.pause_id,
                "task_id": record.task_id,
                "status": record.status,
                "decisions": record.decisions,
                "decided_by": record.decided_by,
            }
        )
        return
    typer.echo(
        f"pause {record.pause_id} of task {record.task_id}: "
        + ", ".join(f"{k} {v}d" for k, v in record.decisions.items())
        + "; the application's resume applies these decisions"
    )


@app.command("approve")
def approve(
    pause_id: str,
    who: Annotated[str, typer.Option(help="Who approves.")],
    call: Annotated[list[str] | None, typer.Option(help="Approve only this call id (repeatable).")] = None,
    reject_call: Annotated[list[str] | None, typer.Option("--reject", help="Reject this call id (repeatable).")] = None,
    why: Annotated[str, typer.Option(help="Why.")] = "",
) -> None:
    """Approve a pause's pending calls (all of them, or those named with --call; --reject names the others)."""
    _decide(pause_id, who, why, call or [], reject_call or [], None if (call or reject_call) else "approve")


@app.command("reject")
def reject(
    pause_id: str,
    who: Annotated[str, typer.Option(help="Who rejects.")],
    call: Annotated[list[str] | None, typer.Option(help="Reject only this call id (repeatable).")] = None,
    why: Annotated[str, typer.Option(help="Why.")] = "",
) -> None:
    """Reject a pause's pending calls (all of them, or those named with --call)."""
    _decide(pause_id, who, why, [], call or [], None if call else "reject")


@app.command("recover")
def recover_cmd(
    task_id: str,
    who: Annotated[str, typer.Option(help="Who decides.")],
    why: Annotated[str, typer.Option(help="The evidence for continuing.")],
    more_turns: Annotated[int, typer.Option(min=0, help="Model turns to add to the limit.")] = 0,
    more_tools: Annotated[int, typer.Option(min=0, help="Tool executions to add to the limit.")] = 0,
) -> None:
    """Reopen a stopped or partial task by a recorded decision, optionally extending its limits; counters stay."""
    _task(task_id)
    delta = {k: v for k, v in {"model_turns": more_turns, "tool_executions": more_tools}.items() if v}
    try:
        transition = recover(_store(), task_id, who=who, why=why, extend=delta)
    except RecoveryError as exc:
        _fail(str(exc), exit_code(exc))
    if _state.json:
        _emit_json(transition)
        return
    task = _task(task_id)
    typer.echo(
        f"task {task_id} reopened by {who}: limits now {task.budget.model_turns} turns, "
        f"{task.budget.tool_executions} tool executions; used so far {task.used.models} and {task.used.tools}"
    )


@app.command("record")
def record(task_id: str) -> None:
    """Export the task's recovery record as JSON."""
    task = _task(task_id)
    if task.outcome is None:
        _fail(f"task {task_id!r} has no terminal outcome yet (status {task.status})", 1)
    try:
        rec = RecoveryRecord.from_json(task.outcome)
    except RecordError as exc:
        _fail(f"task {task_id!r}: {exc}", 1)
    typer.echo(json.dumps(rec.to_dict(), indent=2))


@app.command("pause")
def show_pause(pause_id: str) -> None:
    """Show a pause: its pending calls, the budget stored with it, and its status."""
    record = _store().pause(pause_id)
    if record is None:
        _fail(f"no pause {pause_id!r} in this store")
    try:
        check_pause(record)
        intact = True
    except StoreError:
        intact = False
    data = {k: v for k, v in asdict(record).items() if k != "state"}
    data["digest_ok"] = intact
    if _state.json:
        _emit_json(data)
        return
    typer.echo(
        f"pause {record.pause_id} of task {record.task_id}: {record.status}"
        + ("" if intact else "  (DIGEST MISMATCH: refused)")
    )
    typer.echo(
        f"  stored with: {record.used.models}/{record.budget.model_turns} model turns, "
        f"{record.used.tools}/{record.budget.tool_executions} tool executions"
    )
    _table(
        ["call_id", "tool", "operation_id", "arguments", "decision"],
        [
            [
                c.get("call_id"),
                c.get("tool"),
                c.get("operation_id"),
                c.get("arguments"),
                record.decisions.get(str(c.get("call_id"))),
            ]
            for c in record.pending_calls
        ],
    )


@app.command("demo")
def demo(
    model: Annotated[
        str | None, typer.Option(help="Run on this real model (needs OPENAI_API_KEY) instead of the scripted one.")
    ] = None,
) -> None:
    """Run the demo: an agent looping on a search, and a payment whose response is lost, on this store."""
    import os

    from .demo import run_demo

    if model and not os.environ.get("OPENAI_API_KEY"):
        _fail("--model needs OPENAI_API_KEY; without it the demo runs its scripted model")
    run_demo(db=_state.url, model=model)


@app.command("migrate")
def migrate_cmd(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the SQL and change nothing.")] = False,
) -> None:
    """Bring the store's schema to this agents_loopguard's version (stop the store's workers first)."""
    from .store.sql.migrate import migrate

    done = migrate(_state.url, dry_run=dry_run)
    if _state.json:
        typer.echo(json.dumps(asdict(done)))
    elif dry_run:
        typer.echo(done.sql or f"-- {done.store} is at schema version {done.to_version}: nothing to migrate")
    elif done.revisions:
        typer.echo(f"migrated {done.store} from schema version {done.from_version} to {done.to_version}")
    else:
        typer.echo(f"{done.store} is at schema version {done.to_version}: nothing to migrate")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``loopguard`` console script."""
    try:  # usage errors and exits are typer's; what escapes a command is a store that cannot be used
        app(args=list(argv) if argv is not None else sys.argv[1:], prog_name="loopguard")
    except StoreError as exc:
        typer.echo(f"loopguard: {exc}", err=True)
        raise SystemExit(exit_code(exc)) from None
    except SQLAlchemyError as exc:  # the database went away or refused us mid-command: say so, no traceback
        cause = getattr(exc, "orig", None) or exc
        typer.echo(f"loopguard: cannot use the store {_state.url or '(default)'!r}: {cause}".rstrip(), err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":  # python -m agents_loopguard.cli
    main()
