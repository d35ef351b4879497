"""The ``loopguard`` operator command: look at tasks and pauses, stop tasks, reconcile writes, decide, recover, export.

Every command reads the store named by ``--db`` (or ``LOOPGUARD_DATABASE_URL``, or the default SQLite file) and
prints tables for people (colour only on a terminal) or, with ``--json`` before or after the command, JSON for
scripts: the data of :mod:`agents_loopguard.ops.operator`, and an error as ``{"error": ..., "kind": ...}`` on stdout.
Without ``--json`` an error is one line on stderr. Exit codes come from the error's family
(:func:`agents_loopguard.values.errors.exit_code`): 0 done, 1 refused by the state of a task, pause or operation, 2 bad
input (an unknown id, a wrong URL) or a store that cannot be used.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Annotated, Any

import typer

from . import views
from .ops import operator, tuning
from .store.base import OperationState, Store
from .values.errors import InputError, LoopguardError, NotFoundError, StoreError, error_kind, exit_code

__all__ = ["app", "main"]

app = typer.Typer(
    name="loopguard",
    help="Look at and act on guarded agent tasks: stop, reconcile, approve, recover, export.",
    add_completion=False,
    pretty_exceptions_enable=False,
)

JsonFlag = Annotated[
    bool, typer.Option("--json", metavar="", help="Print JSON for scripts (before or after the command).")
]


class _State:
    url: str | None = None
    json: bool = False
    store: Store | None = None


_state = _State()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loopguard {_package_version()}")
        raise typer.Exit()


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agents-loopguard")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from . import __version__

        return __version__


@app.callback(invoke_without_command=True)
def _options(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", envvar="LOOPGUARD_DATABASE_URL", help="Store URL (sqlite:///path or postgresql+psycopg://)"
        ),
    ] = None,
    as_json: JsonFlag = False,
    version: Annotated[
        bool,
        typer.Option("--version", metavar="", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    _state.url, _state.json, _state.store = db, _state.json or as_json, None
    if ctx.invoked_subcommand is None:  # `loopguard` alone: what it can do
        typer.echo(ctx.get_help())
        raise typer.Exit()


# --- plumbing ---------------------------------------------------------------------------------------------


def _open_store(url: str | None, *, reading: bool) -> Store:
    """The one place the command opens a store. A command that only reads opens it read-only (it never creates
    or alters a database, and a read-only file can be inspected); one that acts opens an existing store only."""
    from .store.sql import SQLStore

    try:
        return SQLStore(url, readonly=True) if reading else SQLStore(url, create=False)
    except LoopguardError:
        raise
    except Exception as exc:  # a malformed URL, a missing driver: say which, on one line
        raise StoreError(f"cannot open the store {_shown_url(url)}: {type(exc).__name__}: {exc}") from exc


def _store(*, reading: bool = False) -> Store:
    if _state.store is None:
        _state.store = _open_store(_state.url, reading=reading)
    return _state.store


def _shown_url(url: str | None) -> str:
    if not url:
        return "(default)"
    try:
        from sqlalchemy.engine import make_url

        return repr(make_url(url).render_as_string(hide_password=True))
    except Exception:  # not even a URL: nothing in it can be hidden reliably, so show nothing of it
        return "(the --db value, which is not a URL)"


def _command() -> str:
    from .demo import loopguard_command

    return loopguard_command()


@contextmanager
def _listed_by(command: str) -> Iterator[None]:
    """An unknown id gets a hint naming the command that lists the known ones."""
    try:
        yield
    except NotFoundError as exc:
        raise NotFoundError(f"{exc}; `{_command()} {command}` lists them") from exc


def _json_flag(as_json: bool) -> None:
    _state.json = _state.json or as_json


def _emit(data: Any, human: Callable[[], None]) -> None:
    if _state.json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False))
    else:
        human()


# --- views ------------------------------------------------------------------------------------------------


@app.command("tasks")
def list_tasks(
    status: Annotated[
        str | None, typer.Option(help=f"Only tasks with this status ({', '.join(operator.TASK_STATUSES)}).")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=0, help="At most this many tasks (newest first).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List tasks, newest first: status, reason, counters against limits, revision, stop mark."""
    _json_flag(as_json)
    rows = operator.task_rows(_store(reading=True), status=status, limit=limit)

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

    _emit(rows, human)


@app.command("show")
def show(
    task_id: str,
    limit: Annotated[int | None, typer.Option(min=0, help="Only the last N steps of the timeline.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show one task: counters against limits, timeline, operations, pauses, transitions, next actions."""
    _json_flag(as_json)
    with _listed_by("tasks"):
        view = operator.task_view(_store(reading=True), task_id, limit=limit)

    def human() -> None:
        views.show_summary(view)
        views.show_tables(view)
        typer.echo(f"\nallowed next actions: {', '.join(view['allowed_next_actions']) or '-'}")
        for step in view.get("next_steps", []):
            typer.echo(f"  - {step}")

    _emit(view, human)


@app.command("record")
def record(task_id: str, as_json: JsonFlag = False) -> None:
    """Export the task's recovery record as JSON."""
    _json_flag(as_json)
    with _listed_by("tasks"):
        data = operator.task_record(_store(reading=True), task_id)
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


@app.command("pause")
def show_pause(pause_id: str, as_json: JsonFlag = False) -> None:
    """Show a pause: its pending calls, the counters stored with it, its status, whether its digest matches."""
    _json_flag(as_json)
    with _listed_by("pauses"):
        view = operator.pause_view(_store(reading=True), pause_id)

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
        views.committed_notes([view])

    _emit(view, human)


@app.command("pauses")
def list_pauses(as_json: JsonFlag = False) -> None:
    """List the pauses waiting for a decision, with what their task has left."""
    _json_flag(as_json)
    waiting = operator.pending_pauses(_store(reading=True))

    def human() -> None:
        if not waiting:
            typer.echo("no pause waits for a decision")
            return
        views.table(
            None,
            ["pause", "task", "calls", "turns left", "tools left", "digest", "created"],
            [
                [
                    v["pause_id"],
                    v["task_id"],
                    ", ".join(f"{c['call_id']}:{c['tool']}" for c in v["pending_calls"]),
                    (v["task"] or v)["left"]["models"],
                    (v["task"] or v)["left"]["tools"],
                    "ok" if v["digest_ok"] else "MISMATCH",
                    v["created_at"],
                ]
                for v in waiting
            ],
            free=("pause", "task", "calls"),
        )
        views.committed_notes(waiting)

    _emit(waiting, human)


# --- actions ----------------------------------------------------------------------------------------------


def _operator_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without USER/LOGNAME)
        return "operator"


@app.command("stop")
def stop(
    task_id: str,
    reason: Annotated[str, typer.Option(help="Why the task is stopped.")] = "operator",
    who: Annotated[str | None, typer.Option(help="Who stops it (default: your user name).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Set the task's stop mark: every later model call and tool execution, by any worker, is refused."""
    _json_flag(as_json)
    with _listed_by("tasks"):
        done = operator.stop_task(_store(), task_id, reason=reason, who=who or _operator_name())

    def show() -> None:
        typer.echo(done["message"])
        for run in done["hooks"]:  # the stop hooks ran once, here, because this call set the mark
            typer.echo(f"stop hook {run['hook']}: {'done' if run['ok'] else 'FAILED: ' + str(run['error'])}")

    _emit(done, show)


@app.command("reconcile")
def reconcile_cmd(
    operation_id: str,
    answer: Annotated[OperationState, typer.Argument(help="What the receiving system says.")],
    who: Annotated[str, typer.Option(help="Who queried the receiver.")],
    why: Annotated[str, typer.Option(help="Evidence: what the receiver answered.")] = "",
    result: Annotated[str | None, typer.Option(help="The receiver's result, as JSON (for committed).")] = None,
    correct: Annotated[
        bool,
        typer.Option("--correct", metavar="", help="Correct the ledger: the receiver contradicts its known state."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Record the receiving system's answer for a write whose result is unknown (or confirm or correct a known one)."""
    _json_flag(as_json)
    try:
        parsed = json.loads(result) if result is not None else None
    except json.JSONDecodeError as exc:
        raise InputError(f"--result is not JSON: {exc}") from None
    done = operator.reconcile_operation(
        _store(), operation_id, answer, who=who, why=why, result=parsed, correct=correct
    )
    _emit(done, lambda: typer.echo(f"{done['message']}; next: {', '.join(done['allowed_next_actions'])}"))


def _decide(pause_id: str, who: str, why: str, approve: list[str], reject: list[str], verb: str | None) -> None:
    with _listed_by("pauses"):
        done = operator.decide_pause(
            _store(),
            pause_id,
            who=who,
            why=why,
            approve=approve,
            reject=reject,
            approve_all=verb == "approve",
            reject_all=verb == "reject",
        )
    _emit(done, lambda: typer.echo(done["message"]))


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
    _json_flag(as_json)
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
    _json_flag(as_json)
    _decide(pause_id, who, why, [], call or [], None if call else "reject")


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
    _json_flag(as_json)
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
    with _listed_by("tasks"):
        done = operator.recover_task(_store(), task_id, who=who, why=why, extend=delta)
    _emit(done, lambda: typer.echo(done["message"]))


@app.command("label")
def label_cmd(
    task_id: str,
    label: Annotated[str, typer.Argument(help="correct (legitimate work to let run) or loop (a loop to cut).")],
    who: Annotated[str, typer.Option(help="Who judges the run.")],
    why: Annotated[str, typer.Option(help="Why.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Label a task for `loopguard tune`: correct (legitimate work) or loop."""
    _json_flag(as_json)
    with _listed_by("tasks"):
        done = tuning.label_task(_store(), task_id, label, who=who, why=why)
    _emit(done, lambda: typer.echo(f"task {task_id}: labelled {label} by {done['who']}"))


@app.command("tune")
def tune_cmd(
    family: Annotated[str | None, typer.Option(help="Only this task family (the id up to ':' or '/').")] = None,
    since: Annotated[str | None, typer.Option(help="Only tasks finished since (ISO 8601, or 7d, 12h).")] = None,
    until: Annotated[str | None, typer.Option(help="Only tasks finished until (ISO 8601, or 7d, 12h).")] = None,
    correct_only: Annotated[
        bool, typer.Option("--correct-only", metavar="", help="Only tasks labelled correct are legitimate work.")
    ] = False,
    allowed_false_stops: Annotated[int, typer.Option(min=0, help="False stops a recommendation may cause.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Replay finished tasks under candidate thresholds: each rule's false stops and earlier cuts, and a Policy."""
    _json_flag(as_json)
    since_at, until_at = (tuning.parse_when(t) if t else None for t in (since, until))
    report = tuning.tune(
        _store(reading=True),
        family=family,
        since=since_at,
        until=until_at,
        correct_only=correct_only,
        allowed_false_stops=allowed_false_stops,
    )
    _emit(report, lambda: typer.echo(tuning.render(report)))


@app.command("demo")
def demo(
    model: Annotated[
        str | None, typer.Option(help="Run on this real model (needs OPENAI_API_KEY) instead of the scripted one.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run the demo: an agent looping on a search, and a payment whose response is lost, on this store."""
    import os

    from .demo import run_demo

    _json_flag(as_json)
    if model and not os.environ.get("OPENAI_API_KEY"):
        raise InputError("--model needs OPENAI_API_KEY; without it the demo runs its scripted model")
    if _state.json:
        outcomes = run_demo(db=_state.url, model=model, out=lambda line: None)
        _emit([o.record().to_dict() for o in outcomes], lambda: None)
    else:
        run_demo(db=_state.url, model=model)


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
) -> None:
    """Serve the HTTP API (/api/v1) and the operators' web console over this store.

    Tokens come from LOOPGUARD_SERVER_TOKENS: "name:operator:secret" and "name:workflow:secret:flow,flow" entries.

    Without tokens it listens on loopback only, with a one-run operator token in a file only you can read.

    Needs the server extra of agents-loopguard (FastAPI, Uvicorn, Jinja2, prometheus-client).
    """
    try:
        from .server.serve import serve
    except ImportError as exc:
        raise InputError(
            f"`loopguard serve` needs the server extra: pip install 'agents-loopguard[server]' ({exc})"
        ) from None
    serve(url=_state.url, host=host, port=port, secure_cookies=secure_cookies, log_level=log_level, echo=typer.echo)


# --- entry point ------------------------------------------------------------------------------------------


def _fail(error: BaseException) -> int:
    """Report ``error`` (JSON on stdout under --json, else one line on stderr); return its exit code."""
    message = views.one_line(str(error)) or type(error).__name__
    if _state.json:
        typer.echo(json.dumps({"error": message, "kind": error_kind(error), "exit_code": exit_code(error)}))
    else:
        typer.echo(f"loopguard: {message}", err=True)
    return exit_code(error)


def _not_text(args: list[str]) -> InputError | None:
    """An argument that is not valid UTF-8 (the shell passed bytes; Python kept them as lone surrogates)."""
    for number, arg in enumerate(args, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = os.fsencode(arg)
            return InputError(f"argument {number} ({raw!r}) is not valid UTF-8 text: ids, names and reasons are text")
    return None


def _run(args: list[str]) -> int:
    if (bad := _not_text(args)) is not None:
        return _fail(bad)
    try:
        code = app(args=args, prog_name="loopguard", standalone_mode=False)
    except typer.TyperException as exc:  # usage: a missing option, a bad value, an unknown command
        ctx = getattr(exc, "ctx", None)
        path = str(ctx.command_path).partition(" ")[2] if ctx is not None else ""
        hint = f"; see `{' '.join([_command(), *([path] if path else []), '--help'])}`"
        return _fail(InputError(exc.format_message().rstrip(".") + hint))
    except typer.Abort:  # end of input at a prompt
        return _fail(InputError("aborted"))
    except LoopguardError as exc:
        return _fail(exc)
    except Exception as exc:
        from sqlalchemy.exc import SQLAlchemyError

        if not isinstance(exc, SQLAlchemyError):
            raise
        cause = getattr(exc, "orig", None) or exc  # the database went away or refused us mid-command
        return _fail(StoreError(f"cannot use the store {_shown_url(_state.url)}: {cause}"))
    return code if isinstance(code, int) else 0


@app.command("migrate")
def migrate_cmd(
    dry_run: Annotated[bool, typer.Option("--dry-run", metavar="", help="Print the SQL and change nothing.")] = False,
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
    """Entry point of the ``loopguard`` console script and of ``python -m agents_loopguard``."""
    args = list(sys.argv[1:] if argv is None else argv)
    options = args[: args.index("--")] if "--" in args else args
    _state.json = "--json" in options  # so that an error before the command parses is JSON too
    try:
        code = _run(args)
    finally:
        store, _state.store = _state.store, None
        close = getattr(store, "close", None)
        if callable(close):
            close()
    raise SystemExit(code)


if __name__ == "__main__":  # python -m agents_loopguard.cli
    main()
