"""For every test and doctest: the default store (``$LOOPGUARD_DATABASE_URL``) is a fresh SQLite file of the test's
own, never the repository's ``./.loopguard/loopguard.db``.

The doctests of the package's modules are collected too (``testpaths``): a durable adapter whose engine cannot be
installed beside this venv's openai-agents is left out, with the test modules that import it (Temporal's integration
pins openai-agents below 0.23; CI runs them in the oldest-SDK venv)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TEMPORAL_MODULES = [
    "agents_loopguard/durable/temporal.py",
    "tests/support/temporal_flows.py",
    "tests/workers/temporal_worker.py",
]
collect_ignore = [] if importlib.util.find_spec("temporalio") else TEMPORAL_MODULES


@pytest.fixture(autouse=True)
def _default_store_per_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_DATABASE_URL", f"sqlite:///{tmp_path / 'default-store.db'}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first (a stable sort): under ``-n`` each worker starts on the long tests, and the
    short ones fill the gaps, instead of one long test ending the run alone while the other workers wait."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the machine has cores. Many tests wait on another process (a worker, a
    server, a browser) while their worker holds no core: on two cores three workers ran CI's suite in 467 s where two
    took 478 s (two clean-clone CI runs)."""
    import os

    return (os.cpu_count() or 1) + 1
