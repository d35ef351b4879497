"""A real Uvicorn server on 127.0.0.1 for tests: the app in a thread of this process, on a port the OS picks.

The socket is bound before the server starts (port 0), so parallel tests never race for a port, and the test talks
to it over real HTTP (httpx, a browser, another process).
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

__all__ = ["LiveServer"]


class LiveServer:
    """``with LiveServer(app) as server: httpx.get(server.url + "/api/v1/health")``."""

    def __init__(self, app: Any, *, log_level: str = "warning") -> None:
        self.app = app
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level=log_level, lifespan="off", server_header=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self) -> LiveServer:
        self._thread.start()
        give_up = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > give_up:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
