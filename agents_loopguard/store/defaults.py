"""The default store of every entry point: the same persistent ``SQLStore`` the ``loopguard`` command reads.

Without ``store=``, a guarded SDK run, the raw function-calling loop and the command line all use the database named
by ``$LOOPGUARD_DATABASE_URL``, else ``./.loopguard/loopguard.db``: a task run without naming a store can be looked
at, stopped and resumed by the operator, and an approval pause is always persisted. ``MemoryStore`` is used only
when passed. One ``SQLStore`` is kept per database and working directory in a process (opening one costs
milliseconds; a run should not pay it).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sql import SQLStore

__all__ = ["default_store"]

_OPEN: OrderedDict[tuple[str, str], SQLStore] = OrderedDict()
_LOCK = threading.Lock()
_KEEP = 4
"""Default stores kept open at once (a process that switches databases closes the least recently used)."""


def default_store() -> SQLStore:
    """The process's default store for the current ``$LOOPGUARD_DATABASE_URL`` (or the default SQLite file).

    >>> import os, tempfile
    >>> os.environ["LOOPGUARD_DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp()}/doc.db"
    >>> default_store() is default_store()
    True
    >>> del os.environ["LOOPGUARD_DATABASE_URL"]
    """
    from .sql import SQLStore, database_url

    key = (database_url().render_as_string(hide_password=False), os.getcwd())
    with _LOCK:
        store = _OPEN.get(key)
        if store is not None:
            _OPEN.move_to_end(key)
            return store
        store = _OPEN[key] = SQLStore(key[0])
        while len(_OPEN) > _KEEP:
            _, evicted = _OPEN.popitem(last=False)
            evicted.close()
        return store
