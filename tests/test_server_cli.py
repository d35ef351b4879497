"""`loopguard serve` as a real OS process: help, refusals, tokens from the environment, the one-run token file."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server_env import SECRETS

pytestmark = pytest.mark.slow  # `loopguard serve` runs as a process of its own

CLI = [sys.executable, "-m", "agents_loopguard.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_SERVER_TOKENS")}
    return {**clean, **extra}


def run_cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env(**extra))


class Served:
    """A `loopguard serve` process, stopped with SIGINT like a person's Ctrl-C."""

    def __init__(self, db: str, **extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [*CLI, "--db", db, "serve", "--port", str(self.port), "--log-level", "warning"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(**extra),
        )
        give_up = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, self.process.stdout.read() if self.process.stdout else ""
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < give_up, "the server did not start"
            time.sleep(0.1)

    def stop(self) -> str:
        self.process.send_signal(signal.SIGINT)
        out, _ = self.process.communicate(timeout=60)
        return out


@pytest.fixture
def db(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'served.db'}"


def test_serve_help() -> None:
    shown = run_cli("serve", "--help", COLUMNS="120")
    assert shown.returncode == 0
    assert "/api/v1" in shown.stdout and "LOOPGUARD_SERVER_TOKENS" in shown.stdout and "--host" in shown.stdout


def test_a_public_address_without_tokens_is_refused() -> None:
    refused = run_cli("serve", "--host", "0.0.0.0")
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without tokens" in refused.stderr


def test_a_weak_or_malformed_token_is_refused_without_showing_it() -> None:
    weak = run_cli("serve", LOOPGUARD_SERVER_TOKENS="ana:operator:hunter2")
    assert weak.returncode == 2 and "shorter than 20" in weak.stderr and "hunter2" not in weak.stderr
    scope = run_cli("serve", LOOPGUARD_SERVER_TOKENS="ana:admin:correct-horse-battery-staple")
    assert scope.returncode == 2 and "scope must be" in scope.stderr and "correct-horse" not in scope.stderr
    flows = run_cli("serve", LOOPGUARD_SERVER_TOKENS="n8n:workflow:correct-horse-battery-staple")
    assert flows.returncode == 2 and "lists the flows" in flows.stderr


def test_serve_with_tokens_from_the_environment(db: str) -> None:
    tokens = f"ana:operator:{SECRETS['ana']} n8n:workflow:{SECRETS['n8n']}:orders-sync"
    served = Served(db, LOOPGUARD_SERVER_TOKENS=tokens)
    try:
        assert httpx.get(f"{served.url}/api/v1/tasks").status_code == 401
        ok = httpx.get(f"{served.url}/api/v1/tasks", headers={"Authorization": f"Bearer {SECRETS['ana']}"})
        assert ok.status_code == 200 and ok.json()["tasks"] == []
        console = httpx.get(f"{served.url}/", follow_redirects=False)
        assert console.status_code == 303 and console.headers["location"].startswith("/login")
    finally:
        out = served.stop()
    assert "accepted tokens: ana (operator), n8n (workflow)" in out
    assert all(secret not in out for secret in SECRETS.values())


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_one_run_token_file_is_private_and_the_token_works(db: str, tmp_path: Path, stop: signal.Signals) -> None:
    """Ctrl-C (SIGINT) and what kill, systemd and docker stop send (SIGTERM) both stop the server cleanly: the
    token file is removed and the store closed (SQLite's write-ahead log is folded back and deleted)."""
    log = tmp_path / "out.txt"
    port = free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            [*CLI, "--db", db, "serve", "--port", str(port), "--log-level", "warning"],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(),
        )
    try:
        give_up = time.monotonic() + 60
        while not re.search(r"in (\S+operator-token) \(", log.read_text()):
            assert process.poll() is None and time.monotonic() < give_up, log.read_text()
            time.sleep(0.1)
        path = Path(re.search(r"in (\S+operator-token) \(", log.read_text()).group(1))  # type: ignore[union-attr]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        token = path.read_text().strip()
        while True:
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/tasks", headers={"Authorization": f"Bearer {token}"}
                )
                break
            except httpx.HTTPError:
                assert time.monotonic() < give_up
                time.sleep(0.1)
        assert answer.status_code == 200
        assert token not in log.read_text()
    finally:
        process.send_signal(stop)
        code = process.wait(timeout=60)
    assert not path.exists() and not path.parent.exists(), log.read_text()
    assert not (tmp_path / "served.db-wal").exists(), "the store was not closed"
    assert "Traceback" not in log.read_text()
    if stop == signal.SIGTERM:
        assert code == 0 and "stopped (SIGTERM)" in log.read_text(), (code, log.read_text())
