"""Run the server: check the address against the tokens, open the store, serve with Uvicorn until stopped."""

from __future__ import annotations

import os
import secrets
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import uvicorn

from ..ops.probes import PROBES_ENV, load_probes
from .app import create_app
from .config import TOKENS_ENV, ConfigError, ServerConfig, Tokens, is_loopback

__all__ = ["serve", "startup_tokens"]

LOCAL_TOKEN_NAME = "local"


class _Terminated(Exception):
    """SIGTERM arrived (kill, systemd, docker stop), after Uvicorn's own graceful shutdown re-raised it."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


@contextmanager
def _sigterm_unwinds(echo: Callable[[str], None]) -> Iterator[None]:
    """Make SIGTERM unwind like Ctrl-C, so the token file is removed and the store closed.

    Uvicorn shuts down gracefully on SIGTERM, then restores the previous handler and raises the signal again; with
    Python's default handler that ends the process at once and no ``finally`` runs. Ours raises instead, and the
    stop is a clean exit (0), said on the console.
    """
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    except _Terminated:
        echo("loopguard serve: stopped (SIGTERM)")
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _local_token_file(secret: str) -> Iterator[Path]:
    """A file only this user can read, holding the start-up token; removed when the server stops."""
    folder = Path(tempfile.mkdtemp(prefix="loopguard-serve-"))  # mode 0700
    path = folder / "operator-token"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(secret + "\n")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
        folder.rmdir()


def startup_tokens(host: str, environ: Mapping[str, str] | None = None) -> Tokens:
    """The configured tokens; none on a loopback address is allowed (serve makes one), none elsewhere is refused.

    >>> startup_tokens("0.0.0.0", {})
    Traceback (most recent call last):
    ...
    agents_loopguard.server.config.ConfigError: refusing to listen on 0.0.0.0 without tokens: anyone who reaches \
it could approve and stop tasks; set LOOPGUARD_SERVER_TOKENS (see docs/server.md), or listen on 127.0.0.1
    """
    tokens = Tokens.from_env(environ)
    if not tokens and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without tokens: anyone who reaches it could approve and stop tasks; "
            f"set {TOKENS_ENV} (see docs/server.md), or listen on 127.0.0.1"
        )
    return tokens


def serve(
    *,
    url: str | None,
    host: str = "127.0.0.1",
    port: int = 8765,
    secure_cookies: bool = False,
    log_level: str = "info",
    echo: Callable[[str], None] = print,
    probes: str | None = None,
) -> None:
    """Serve the API and the console over the store at ``url`` until interrupted.

    Without tokens on a loopback address, an operator token named ``local`` is made for this run and written to a
    file only this user can read (its path is printed, never the token). SIGINT and SIGTERM both stop it cleanly:
    the file is removed and the store closed.

    ``probes`` (else ``LOOPGUARD_PROBES``) names the registry of the writes' probes, ``package.module:attribute``
    (:func:`~agents_loopguard.ops.probes.load_probes`), imported once here: operators may then ask the receiver.
    """
    from ..store.sql import SQLStore

    tokens = startup_tokens(host)
    registry = load_probes(probes) if probes or os.environ.get(PROBES_ENV) else {}
    with _sigterm_unwinds(echo), _maybe_local_token(tokens, echo) as tokens:
        store = SQLStore(url)
        try:
            config = ServerConfig(tokens=tokens, secure_cookies=secure_cookies, probes=registry)
            app = create_app(store, config)
            if registry:
                echo(f"probes of the writes: {', '.join(sorted(registry))}")
            shown = f"[{host}]" if ":" in host else host
            echo(f"loopguard serve: console http://{shown}:{port}/ , API http://{shown}:{port}/api/v1")
            echo(f"accepted tokens: {', '.join(tokens.names())}")
            uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False, proxy_headers=False)
        finally:
            store.close()


@contextmanager
def _maybe_local_token(tokens: Tokens, echo: Callable[[str], None]) -> Iterator[Tokens]:
    if tokens:
        yield tokens
        return
    secret = secrets.token_urlsafe(32)
    with _local_token_file(secret) as path:
        echo(
            f"no {TOKENS_ENV} is set: made an operator token '{LOCAL_TOKEN_NAME}' for this run, in {path} "
            "(readable by you only; removed when the server stops)"
        )
        yield tokens.with_operator(LOCAL_TOKEN_NAME, secret)
