"""Worker OS processes for the store's cross-process tests (tests/workers/store_worker.py), started together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agents_loopguard.store import SQLStore
from tests.support.forked import ForkedPopen

ROOT = Path(__file__).resolve().parents[2]


class Worker:
    """One worker process and its files."""

    def __init__(self, tmp: Path, name: str, mode: str, **cfg: Any) -> None:
        self.name = name
        self.log = tmp / f"{name}.log"
        self.result = tmp / f"{name}.json"
        self.stderr = tmp / f"{name}.err"
        self.ready = tmp / f"{name}.ready"
        self.log.touch()
        cfg = {**cfg, "log": str(self.log), "result": str(self.result), "ready": str(self.ready)}
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(self.stderr, "w") as err:
            self.proc = ForkedPopen(
                [sys.executable, "-m", "tests.workers.store_worker", mode, json.dumps(cfg)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            assert self.proc.poll() is None, f"{self.name} died before it was ready:\n{self.stderr.read_text()}"
            assert time.monotonic() < deadline, f"{self.name} was not ready in {timeout} s"
            time.sleep(0.01)

    def finish(self, timeout: float = 120) -> Any:
        code = self.proc.wait(timeout=timeout)
        assert code == 0, f"{self.name} exited {code}:\n{self.stderr.read_text()}"
        return json.loads(self.result.read_text())

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()


def start_together(tmp: Path, workers: list[Worker]) -> None:
    for worker in workers:
        worker.wait_ready()
    (tmp / "go").touch()


def shared_barrier(tmp: Path, workers: int) -> dict[str, Any]:
    """Worker options that make sharing certain: a worker takes its second unit of the shared budget only once every
    worker took its first (see ``first_units_taken`` in the worker); the race for the rest stays free."""
    took = tmp / "took"
    took.mkdir()
    return {"took": str(took), "workers": workers}


def prepared(url: str) -> str:
    """Create the schema before the race (first use by many processes is tested elsewhere)."""
    with SQLStore(url) as store:
        store.tasks()
    return url
