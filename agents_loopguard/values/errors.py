"""The errors a caller handles, in three families that the command line and the HTTP API map by type.

=====================  =========================================================  =========  ===========
family                 means                                                      exit code  HTTP status
=====================  =========================================================  =========  ===========
:class:`InputError`    bad input: an unknown id, a malformed argument             2          400
:class:`NotFoundError` (an :class:`InputError`) no task, pause or operation so    2          404
:class:`StateError`    refused by the state of a task, pause or operation         1          409
:class:`StoreError`    any other: the store cannot be used (unreachable, wrong    2          503
                       schema, a path that cannot hold a database...)
=====================  =========================================================  =========  ===========

Every family derives from :class:`StoreError` (and it from :class:`LoopguardError`), so ``except StoreError``
keeps catching everything the store and the operator functions raise on purpose.

>>> exit_code(NotFoundError("no task 't-1'")), http_status(NotFoundError("no task 't-1'"))
(2, 404)
>>> exit_code(StateError("operation 'op-1' is already committed")), http_status(StateError("x"))
(1, 409)
"""

from __future__ import annotations

__all__ = [
    "InputError",
    "LoopguardError",
    "NotFoundError",
    "StateError",
    "StoreError",
    "error_kind",
    "exit_code",
    "http_status",
    "postgres_driver_missing",
]


class LoopguardError(Exception):
    """Base of every error agents_loopguard raises on purpose."""


class StoreError(LoopguardError, RuntimeError):
    """The store cannot be used as asked; the message names the store and says what to do."""


class InputError(StoreError):
    """Bad input: an argument, an id or a value that does not fit (exit code 2, HTTP 400)."""


class NotFoundError(InputError):
    """No task, pause or operation with that id in this store (exit code 2, HTTP 404)."""


class StateError(StoreError):
    """Refused by the state of a task, pause or operation: a decision that is final, a task that needs
    reconciliation first (exit code 1, HTTP 409)."""


def exit_code(error: BaseException) -> int:
    """The ``loopguard`` command's exit code for ``error``: 1 refused by state, 2 anything else."""
    return 1 if isinstance(error, StateError) else 2


def http_status(error: BaseException) -> int:
    """The HTTP status of ``error`` in the operator API: 404, 400, 409, or 503 for a store fault."""
    if isinstance(error, NotFoundError):
        return 404
    if isinstance(error, InputError):
        return 400
    if isinstance(error, StateError):
        return 409
    return 503 if isinstance(error, StoreError) else 500


def error_kind(error: BaseException) -> str:
    """The family of ``error`` as one word, for errors given as data (``loopguard --json``, the HTTP API).

    >>> error_kind(NotFoundError("no task 't-1'")), error_kind(InputError("x")), error_kind(StateError("x"))
    ('not_found', 'input', 'state')
    >>> error_kind(StoreError("cannot connect"))
    'store'
    """
    if isinstance(error, NotFoundError):
        return "not_found"
    if isinstance(error, InputError):
        return "input"
    if isinstance(error, StateError):
        return "state"
    return "store"


def postgres_driver_missing(store: str) -> str:
    """The one-line message of a :class:`StoreError` raised when ``store`` (a PostgreSQL URL, password hidden) is
    used without the psycopg driver, which comes with the ``postgres`` extra.

    >>> print(postgres_driver_missing("postgresql+psycopg://app@db/agents"))  # doctest: +NORMALIZE_WHITESPACE
    postgresql+psycopg://app@db/agents: PostgreSQL needs the psycopg driver:
    pip install 'agents-loopguard[postgres]' (SQLite needs nothing extra)
    """
    return (
        f"{store}: PostgreSQL needs the psycopg driver: pip install 'agents-loopguard[postgres]' "
        "(SQLite needs nothing extra)"
    )
