"""What a SQLStore's connection sends to its database during a call: the statements (SQLite) or the protocol
messages (PostgreSQL, libpq's trace), for tests and benchmarks that pin what a guarded step costs."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from typing import Any

from agents_loopguard.store.sql import SQLStore


def _pg_trace(store: SQLStore, call: Callable[[], Any]) -> list[tuple[str, str]]:
    """PostgreSQL: (direction, message) of every message libpq traced on the store's connection during ``call``;
    direction ``F`` is the client's (frontend), ``B`` the server's."""
    dbapi = store._cursor().connection  # the connection the store's steps run on, in this thread
    with tempfile.TemporaryFile("w+") as trace:
        dbapi.pgconn.trace(trace.fileno())
        try:
            call()
        finally:
            dbapi.pgconn.untrace()
        trace.seek(0)
        return [
            (fields[1], fields[3]) for fields in (line.rstrip("\n").split("\t") for line in trace) if len(fields) > 3
        ]


def sent(store: SQLStore, call: Callable[[], Any]) -> list[str]:
    """SQLite: the statements the store's connection ran during ``call`` (BEGIN and COMMIT too); PostgreSQL: the
    protocol messages it sent (``Parse``, ``Bind``, ``Execute``, ``Sync``, ``Query``...)."""
    if store.backend == "sqlite":
        dbapi = store._cursor().connection
        seen: list[str] = []
        dbapi.set_trace_callback(seen.append)
        try:
            call()
        finally:
            dbapi.set_trace_callback(None)
        return seen
    return [message for direction, message in _pg_trace(store, call) if direction == "F"]


def pg_sent(store: SQLStore, call: Callable[[], Any]) -> list[str]:
    """PostgreSQL: the client's messages during ``call``, a ``Parse`` with the statement's text (``Parse: SELECT
    ...``), the others by their name (``Sync``, ``Bind``...)."""
    dbapi = store._cursor().connection
    with tempfile.TemporaryFile("w+") as trace:
        dbapi.pgconn.trace(trace.fileno())
        try:
            call()
        finally:
            dbapi.pgconn.untrace()
        trace.seek(0)
        text = trace.read()
    messages = []
    for line in text.split("\n20"):  # a statement's text spans lines; each message starts with its timestamp
        fields = line.split("\t", 4)
        if len(fields) > 3 and fields[1] == "F":
            statement = fields[4].split('"')[3].strip() if fields[3] == "Parse" else ""
            messages.append(f"Parse: {' '.join(statement.split())}" if statement else fields[3])
    return messages


def round_trips(store: SQLStore, call: Callable[[], Any]) -> int:
    """PostgreSQL: how many times the store's connection sent messages and then waited for the server's answer
    during ``call`` (a pipeline of several statements and Syncs is one)."""
    directions = [direction for direction, _ in _pg_trace(store, call)]
    return sum(1 for a, b in itertools.pairwise(directions) if (a, b) == ("F", "B"))
