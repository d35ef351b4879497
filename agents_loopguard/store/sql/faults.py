"""What the store says when the database fails it: one line, naming the store, saying what to do.

Every fault of the database or of the file system under it reaches the caller as a
:class:`~agents_loopguard.StoreError` worded here: a path that cannot hold a database, a file that cannot be
written, a full disk, a connection lost in the middle of a step, a server that cannot be reached. Nothing of a step
that failed is kept: SQLite steps are transactions (rolled back), PostgreSQL steps are single statements or
transactions (atomic on the server).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ...values.errors import InputError, StoreError

__all__ = [
    "connection_lost",
    "damaged_text",
    "database_fault",
    "folder_fault",
    "one_line",
    "open_fault",
    "unicode_fault",
]

_SQLITE_HINTS = {
    3: "this process may not access it (permission denied)",  # SQLITE_PERM
    8: "the file or its folder is read-only for this process: open it with readonly=True to inspect it",  # READONLY
    10: "the disk failed to read or write it",  # SQLITE_IOERR
    11: "the file is damaged",  # SQLITE_CORRUPT
    13: "the disk holding it is full: free space and try again; nothing of this step was kept",  # SQLITE_FULL
    14: "the file cannot be opened: check that its folder exists and that this process may write there",  # CANTOPEN
    26: "the file is not a SQLite database",  # SQLITE_NOTADB
}
_PG_HINTS = {
    "25006": "the store is open read-only",  # read_only_sql_transaction
    "53100": "the database server's disk is full; nothing of this step was kept",  # disk_full
    "53200": "the database server is out of memory",
    "42501": "the database user may not do this (insufficient privilege)",
}


def one_line(text: str) -> str:
    """A message on one line: its lines joined, blanks dropped.

    >>> one_line('connection failed: refused\\n\\tIs the server running?\\n')
    'connection failed: refused; Is the server running?'
    """
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


def _reason(exc: BaseException) -> str:
    return one_line(str(exc)) or type(exc).__name__


def folder_fault(name: str, folder: Path, exc: OSError) -> StoreError:
    """The error of a SQLite file whose folder cannot be created."""
    if isinstance(exc, FileExistsError) or (folder.exists() and not folder.is_dir()):
        problem = f"{folder} is a file, not a folder"
    elif exc.errno == errno.ENOTDIR:
        problem = f"a part of {folder} is a file, not a folder"
    else:
        problem = f"cannot create the folder {folder}: {exc.strerror or _reason(exc)}"
    return StoreError(f"{name}: {problem}")


def damaged_text(name: str, where: str, exc: UnicodeDecodeError) -> StoreError:
    """The error of a SQLite file whose schema or messages are not valid UTF-8: bytes were flipped in it (the
    driver fails to decode SQLite's own error text, so its code is lost)."""
    return StoreError(
        f"{name}: {where}: the file is damaged (it holds bytes that are not valid UTF-8 at offset {exc.start} of "
        "a text SQLite returned): restore it from a backup, or check it with `sqlite3 FILE 'PRAGMA integrity_check'`"
    )


def unicode_fault(name: str, where: str, exc: UnicodeError) -> StoreError:
    """A step that failed on text: SQLite's error text about a damaged file that cannot be decoded, or a value sent
    to the store with a lone surrogate (bad input: nothing was stored)."""
    if isinstance(exc, UnicodeDecodeError):
        return damaged_text(name, where, exc)
    start = getattr(exc, "start", "?")
    return InputError(
        f"{name}: a value given to the store is not valid Unicode text (a lone surrogate at position {start} of a "
        "string): nothing was stored"
    )


def open_fault(name: str, where: str, exc: BaseException, *, path: Path | None) -> StoreError:
    """The error of a database that cannot be opened (a SQLite file) or reached (a PostgreSQL server)."""
    cause = getattr(exc, "orig", None) or exc
    if isinstance(cause, UnicodeDecodeError):
        return damaged_text(name, where, cause)
    if path is None:
        return StoreError(f"{name}: cannot connect: {_reason(cause)}")
    if path.is_dir():
        return StoreError(f"{name}: {path} is a folder, not a database file")
    folder = path.parent
    if not path.exists() and not os.access(folder, os.W_OK):
        return StoreError(f"{name}: cannot create {path}: this process may not write in {folder} (permission denied)")
    if path.exists() and not os.access(path, os.R_OK):
        return StoreError(f"{name}: cannot read {path}: permission denied")
    return database_fault(name, where, cause)


def connection_lost(name: str, exc: BaseException) -> StoreError:
    """The error of a step whose PostgreSQL connection broke under it (a killed backend, a server restart)."""
    return StoreError(
        f"{name}: the connection to the database was lost during this step ({_reason(exc)}): the step was not "
        "confirmed; the store reconnects on the next one"
    )


def database_fault(name: str, where: str, exc: BaseException) -> StoreError:
    """The error of a statement the database refused or could not run (the step was rolled back)."""
    text = _reason(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        hint = _SQLITE_HINTS.get(int(code) & 0xFF)  # the primary result code of an extended one
        if hint is not None:
            return StoreError(f"{name}: {where}: {text}: {hint}")
    hint = _PG_HINTS.get(str(getattr(exc, "sqlstate", None)))
    if hint is not None:
        return StoreError(f"{name}: {text}: {hint}")
    return StoreError(f"{name}: {type(exc).__name__}: {text}")
