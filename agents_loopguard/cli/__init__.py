"""The ``loopguard`` operator command: look at tasks and pauses, stop tasks, reconcile writes, decide, recover, prune,
export.

Every command reads the store named by ``--db`` (or ``LOOPGUARD_DATABASE_URL``, or the default SQLite file) and
prints tables for people (colour only on a terminal) or, with ``--json`` before or after the command, JSON for
scripts: the data of :mod:`agents_loopguard.ops.operator`, and an error as ``{"error": ..., "kind": ...}`` on stdout.
Without ``--json`` an error is one line on stderr. Exit codes come from the error's family
(:func:`agents_loopguard.values.errors.exit_code`): 0 done, 1 refused by the state of a task, pause or operation, 2 bad
input (an unknown id, a wrong URL) or a store that cannot be used.

Each command is a module of this package that registers itself on :data:`app` (see :mod:`.base`); a new command is
a new module and one name in :data:`COMMANDS`. The command imports no agent framework and no model client.
"""

from __future__ import annotations

from importlib import import_module

from .base import app, main
from .base import package_version as _package_version  # noqa: F401 - importable as before

__all__ = ["COMMANDS", "app", "main"]

COMMANDS = ("tasks", "pauses", "actions", "tuning", "prune", "serving", "mcp")
"""The modules of this package that hold commands, in the order ``loopguard --help`` lists them."""

for _module in COMMANDS:
    import_module(f"{__name__}.{_module}")
