"""Store fixtures' bodies shared by test modules (a module makes one its fixture with
``store = pytest.fixture(sql_store, name="store")``)."""

from __future__ import annotations

from collections.abc import Iterator

from agents_loopguard.store import SQLStore

__all__ = ["sql_store"]


def sql_store(sql_url: str) -> Iterator[SQLStore]:
    """A :class:`SQLStore` on the fresh database of ``sql_url`` (each SQL backend), closed afterwards."""
    opened = SQLStore(sql_url)
    yield opened
    opened.close()
