"""For every test and doctest: the default store (``$LOOPGUARD_DATABASE_URL``) is a fresh SQLite file of the test's
own, never the repository's ``./.loopguard/loopguard.db``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _default_store_per_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'default-store.db'}")
