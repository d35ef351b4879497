"""The real Restate server for the tests: ``restate-server`` from the npm registry's
``@restatedev/restate-server-linux-x64`` package (a binary inside a registry package), run on free ports of 127.0.0.1
with its data in a temporary folder.

The binary is ``$LOOPGUARD_RESTATE_SERVER`` when set (CI installs it and sets it); otherwise the first test that needs
it installs the package with ``npm`` into a folder of the system's temp dir, kept for later runs. A missing binary
that cannot be installed fails the test, never skips it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VERSION = "1.7.12"
PACKAGE = "@restatedev/restate-server-linux-x64"
BINARY = Path("node_modules") / "@restatedev" / "restate-server-linux-x64" / "bin" / "restate-server"


def install(folder: Path) -> Path:
    """``npm install`` the server's package into ``folder`` (once: a lock for parallel test workers)."""
    binary = folder / BINARY
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError(f"the Restate tests need npm for {PACKAGE}@{VERSION} (or LOOPGUARD_RESTATE_SERVER)")
            subprocess.run(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(folder),
                    "--no-save",
                    "--no-audit",
                    "--no-fund",
                    f"{PACKAGE}@{VERSION}",
                ],
                check=True,
                capture_output=True,
                timeout=300,
            )
    return binary


def server_binary() -> Path:
    """The restate-server binary: ``$LOOPGUARD_RESTATE_SERVER``, else installed from npm (Linux x86-64 only)."""
    given = os.environ.get("LOOPGUARD_RESTATE_SERVER")
    if given:
        path = Path(given)
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"LOOPGUARD_RESTATE_SERVER={given} is not an executable restate-server")
        return path
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise RuntimeError(f"{PACKAGE} is for Linux x86-64: set LOOPGUARD_RESTATE_SERVER to a restate-server binary")
    return install(Path(tempfile.gettempdir()) / f"loopguard-restate-server-{VERSION}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(method: str, url: str, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
    """(status, JSON or text) of one HTTP request (the standard library's client)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    text = raw.decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class RestateServer:
    """A running restate-server: ``ingress`` and ``admin`` are its base URLs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ingress_port, self.admin_port, fabric = free_port(), free_port(), free_port()
        self.ingress, self.admin = f"http://127.0.0.1:{self.ingress_port}", f"http://127.0.0.1:{self.admin_port}"
        env = {
            **os.environ,
            "RESTATE_INGRESS__BIND_PORT": str(self.ingress_port),
            "RESTATE_ADMIN__BIND_PORT": str(self.admin_port),
            "RESTATE_BIND_PORT": str(fabric),
            "RESTATE_DEFAULT_NUM_PARTITIONS": "2",
            "RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE": "256MiB",
            "RESTATE_ADMIN__DISABLE_WEB_UI": "true",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_SHUTDOWN_TIMEOUT": "5s",
            # a handler process that died is retried soon after its successor listens (default: 500 ms doubling
            # up to a minute)
            "RESTATE_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL": "100ms",
            "RESTATE_DEFAULT_RETRY_POLICY__MAX_INTERVAL": "500ms",
        }
        self.log = folder / "restate-server.log"
        command = [str(server_binary()), "--base-dir", str(folder / "data"), "--bind-ip", "127.0.0.1"]
        command += ["--listen-mode", "tcp", "--no-logo", "--node-name", "loopguard-test"]
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for url in (f"{self.admin}/health", f"{self.ingress}/restate/health"):
            while True:
                assert self.process.poll() is None, f"restate-server exited:\n{self.log.read_text()[-3000:]}"
                with contextlib.suppress(OSError):
                    if http("GET", url, timeout=2)[0] == 200:
                        break
                assert time.monotonic() < deadline, f"restate-server not ready in {timeout} s"
                time.sleep(0.1)

    def register(self, uri: str) -> None:
        """Register the deployment (a handler process listening at ``uri``)."""
        status, body = http("POST", f"{self.admin}/deployments", {"uri": uri, "force": True})
        assert status in (200, 201), (status, body)

    def send(self, service: str, handler: str, body: Any) -> str:
        """Invoke ``service/handler`` without waiting: the invocation's id."""
        status, answer = http("POST", f"{self.ingress}/{service}/{handler}/send", body)
        assert status in (200, 202) and isinstance(answer, dict), (status, answer)
        return str(answer["invocationId"])

    def cancel(self, invocation_id: str) -> None:
        """Cancel the invocation (Restate's admin API: cancelled at the handler's next journaled step)."""
        status, body = http("PATCH", f"{self.admin}/invocations/{invocation_id}/cancel")
        assert status in (200, 202), (status, body)

    def result(self, invocation_id: str, timeout: float = 120) -> Any:
        """Wait for the invocation's output (Restate's attach)."""
        status, answer = http("GET", f"{self.ingress}/restate/invocation/{invocation_id}/attach", timeout=timeout)
        assert status == 200, (status, answer)
        return answer

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@contextlib.contextmanager
def restate_server(folder: Path) -> Iterator[RestateServer]:
    server = RestateServer(folder)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
