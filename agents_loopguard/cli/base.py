"""The ``loopguard`` application and what its commands share: the global options, the store they open, how they
print (a table for people, ``--json`` for scripts) and how an error becomes one line and an exit code.

Each command lives in a module of its own in this package and registers itself on :data:`app` when imported
(:mod:`agents_loopguard.cli` lists the modules). Nothing here imports an agent framework or a model client: an
operator command starts without them.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .. import views
from ..values.errors import InputError, LoopguardError, NotFoundError, StoreError, error_kind, exit_code

if TYPE_CHECKING:  # typing only: the store loads when a command opens it
    from ..store.base import Store

__all__ = [
    "JsonFlag",
    "app",
    "emit",
    "json_flag",
    "listed_by",
    "main",
    "next_page",
    "operator_name",
    "package_version",
    "state",
    "store",
]

app = typer.Typer(
    name="loopguard",
    help="Look at and act on guarded agent tasks: stop, reconcile, approve, recover, prune, export.",
    add_completion=False,
    pretty_exceptions_enable=False,
)

JsonFlag = Annotated[
    bool, typer.Option("--json", metavar="", help="Print JSON for scripts (before or after the command).")
]


class State:
    """What the global options said, and the store the command opened (closed by :func:`main`)."""

    url: str | None = None
    json: bool = False
    store: Any = None
    args: tuple[str, ...] = ()
    """The command line as given (for the hint that shows the next page's command)."""


state = State()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loopguard {package_version()}")
        raise typer.Exit()


def package_version() -> str:
    """The installed distribution's version (the package's own when run from a source tree never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agents-loopguard")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from .. import __version__

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
    state.url, state.json, state.store = db, state.json or as_json, None
    if ctx.invoked_subcommand is None:  # `loopguard` alone: what it can do
        typer.echo(ctx.get_help())
        raise typer.Exit()


# --- plumbing ---------------------------------------------------------------------------------------------


def _open_store(url: str | None, *, reading: bool) -> Store:
    """The one place the command opens a store. A command that only reads opens it read-only (it never creates
    or alters a database, and a read-only file can be inspected); one that acts opens an existing store only."""
    from ..store.sql import SQLStore

    try:
        return SQLStore(url, readonly=True) if reading else SQLStore(url, create=False)
    except LoopguardError:
        raise
    except Exception as exc:  # a malformed URL, a missing driver: say which, on one line
        raise StoreError(f"cannot open the store {shown_url(url)}: {type(exc).__name__}: {exc}") from exc


def store(*, reading: bool = False) -> Store:
    """The store the global ``--db`` names, opened once per command (read-only for a command that only reads)."""
    if state.store is None:
        state.store = _open_store(state.url, reading=reading)
    opened: Store = state.store
    return opened


def shown_url(url: str | None) -> str:
    """A store URL as an error shows it: its password hidden."""
    if not url:
        return "(default)"
    try:
        from sqlalchemy.engine import make_url

        return repr(make_url(url).render_as_string(hide_password=True))
    except Exception:  # not even a URL: nothing in it can be hidden reliably, so show nothing of it
        return "(the --db value, which is not a URL)"


def command_name() -> str:
    """How the user runs this command (``loopguard`` or ``python -m agents_loopguard``), for hints."""
    from ..demo import loopguard_command

    return loopguard_command()


@contextmanager
def listed_by(command: str) -> Iterator[None]:
    """An unknown id gets a hint naming the command that lists the known ones."""
    try:
        yield
    except NotFoundError as exc:
        raise NotFoundError(f"{exc}; `{command_name()} {command}` lists them") from exc


def json_flag(as_json: bool) -> None:
    """A command's own ``--json`` (after its name) means the same as the global one."""
    state.json = state.json or as_json


def emit(data: Any, human: Callable[[], None]) -> None:
    """Print ``data`` as JSON under ``--json``, else call ``human`` to print it for a person."""
    if state.json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False))
    else:
        human()


def next_page(cursor: str | None) -> None:
    """Under a page of a list, the command that shows the page after it (nothing on the last page)."""
    if cursor is None:
        return
    args, skip = [], False
    for arg in state.args:
        if skip:
            skip = False
        elif arg == "--cursor":
            skip = True
        elif not arg.startswith("--cursor="):
            args.append(shlex.quote(arg))
    typer.echo(f"next page: {command_name()} {' '.join([*args, '--cursor', cursor])}")


def operator_name() -> str:
    """Who acts when no ``--who`` is given: the user's login name."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without USER/LOGNAME)
        return "operator"


# --- entry point ------------------------------------------------------------------------------------------


def _fail(error: BaseException) -> int:
    """Report ``error`` (JSON on stdout under --json, else one line on stderr); return its exit code."""
    message = views.one_line(str(error)) or type(error).__name__
    if state.json:
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
        hint = f"; see `{' '.join([command_name(), *([path] if path else []), '--help'])}`"
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
        return _fail(StoreError(f"cannot use the store {shown_url(state.url)}: {cause}"))
    return code if isinstance(code, int) else 0


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``loopguard`` console script and of ``python -m agents_loopguard``."""
    args = list(sys.argv[1:] if argv is None else argv)
    options = args[: args.index("--")] if "--" in args else args
    state.json = "--json" in options  # so that an error before the command parses is JSON too
    state.args = tuple(args)
    try:
        code = _run(args)
    finally:
        opened, state.store = state.store, None
        close = getattr(opened, "close", None)
        if callable(close):
            close()
    raise SystemExit(code)
