"""A scripted, Gemini-compatible HTTP server on 127.0.0.1: Google ADK's own ``Gemini`` model (the real
``google-genai`` client) talks to it over real HTTP, nothing monkeypatched.

Each ``POST .../models/{model}:generateContent`` consumes the next step of the script and is answered in the
Gemini API's JSON shape::

    with ScriptedGeminiServer([calls(("lookup", {"order": 42})), text("done")]) as server:
        agent = LlmAgent(name="clerk", model=Gemini(model="gemini-2.5-flash", base_url=server.base_url), ...)
        ...
        assert server.requests[0].mode == "AUTO"

A step is a :class:`Reply` (function calls and/or text), an :class:`HttpError` (the API answers with that
status; the client raises ``google.genai.errors.APIError``) or a :class:`Dynamic` (computed from the request's
body). A ``:streamGenerateContent`` request (ADK's ``StreamingMode.SSE``) gets the answer as server-sent events,
its text word by word. Standard library only.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["Dynamic", "HttpError", "Recorded", "Reply", "ScriptedGeminiServer", "calls", "dynamic", "error", "text"]

JSON = dict[str, Any]
POLL = 0.01
"""How often the serving thread looks for ``shutdown()`` (seconds): the server stops within it (socketserver's
default, 0.5 s, cost every ADK test half a second at its end)."""


@dataclass(frozen=True)
class Reply:
    """One answer: function calls ``(name, args)`` and/or text; usage reported as 10 in, 5 out."""

    calls: tuple[tuple[str, Any], ...] = ()
    text: str | None = None
    call_ids: tuple[str, ...] = ()
    """The calls' ids (ADK makes its own when the model gives none)."""
    input_tokens: int = 10
    output_tokens: int = 5


@dataclass(frozen=True)
class HttpError:
    """The API answers with HTTP ``status``."""

    status: int
    message: str = "scripted error"


@dataclass(frozen=True)
class Dynamic:
    """A step computed from the request: ``respond(body) -> Reply | HttpError``."""

    respond: Callable[[JSON], Reply | HttpError]


@dataclass(frozen=True)
class RawArgs:
    """A call's ``args`` written verbatim into the answer: JSON no encoder writes (100,000 levels deep)."""

    text: str


Step = Reply | HttpError | Dynamic


def calls(*pairs: tuple[str, Mapping[str, Any]]) -> Reply:
    """A model turn asking for these function calls."""
    return Reply(calls=tuple(pairs))


def text(answer: str) -> Reply:
    """A model turn with a final text answer."""
    return Reply(text=answer)


def error(status: int) -> HttpError:
    """A request the API answers with HTTP ``status``."""
    return HttpError(status)


def dynamic(respond: Callable[[JSON], Reply | HttpError]) -> Dynamic:
    """A step computed from the request's body."""
    return Dynamic(respond)


@dataclass(frozen=True)
class Recorded:
    """One request the server received."""

    path: str
    body: JSON

    @property
    def mode(self) -> str | None:
        """The function-calling mode the request carried (``AUTO``, ``ANY``, ``NONE``), ``None`` when absent."""
        config = (self.body.get("toolConfig") or {}).get("functionCallingConfig") or {}
        mode = config.get("mode")
        return str(mode) if mode is not None else None

    @property
    def function_responses(self) -> list[JSON]:
        """The function responses the request's contents carry, oldest first."""
        found: list[JSON] = []
        for content in self.body.get("contents", []):
            for part in content.get("parts", []):
                if "functionResponse" in part:
                    found.append(part["functionResponse"])
        return found


def _answer(reply: Reply) -> JSON:
    parts: list[JSON] = []
    if reply.text is not None:
        parts.append({"text": reply.text})
    for index, (name, args) in enumerate(reply.calls):
        call: JSON = {"name": name, "args": args}
        if index < len(reply.call_ids):
            call["id"] = reply.call_ids[index]
        parts.append({"functionCall": call})
    usage = {
        "promptTokenCount": reply.input_tokens,
        "candidatesTokenCount": reply.output_tokens,
        "totalTokenCount": reply.input_tokens + reply.output_tokens,
    }
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "scripted"}


def _encoded(payload: JSON) -> bytes:
    """``payload`` as JSON, each :class:`RawArgs` written verbatim."""
    raws: list[str] = []

    def placeholder(value: Any) -> str:
        if not isinstance(value, RawArgs):
            raise TypeError(f"{type(value).__name__} is not JSON")
        raws.append(value.text)
        return f"\x00raw{len(raws) - 1}"

    text = json.dumps(payload, default=placeholder)
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{index}"), raw)
    return text.encode()


def _chunks(payload: JSON) -> list[JSON]:
    """A whole answer as the chunks of a stream: each text part word by word, then the rest with the usage."""
    candidate = payload["candidates"][0]
    parts = candidate["content"]["parts"]
    chunks: list[JSON] = []
    for part in parts:
        if "text" in part:
            words = part["text"].split(" ")
            for i, word in enumerate(words):
                piece = word if i == len(words) - 1 else word + " "
                chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}]})
    rest = [part for part in parts if "text" not in part]
    last = {**candidate, "content": {"role": "model", "parts": rest}}
    chunks.append({**payload, "candidates": [last]})
    return chunks


@dataclass
class ScriptedGeminiServer:
    """Serves ``steps`` in order on 127.0.0.1; a request past the end of the script is answered HTTP 500 and
    recorded in :attr:`overrun` (a test then fails on it)."""

    steps: Iterable[Step]
    requests: list[Recorded] = field(default_factory=list)
    overrun: int = 0

    def __post_init__(self) -> None:
        self._queue: deque[Step] = deque(self.steps)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, payload = server._respond(self.path, body)
                if status == 200 and ":streamGenerateContent" in self.path:
                    self._stream(payload)
                    return
                data = _encoded(payload)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, payload: JSON) -> None:
                """Server-sent events (``alt=sse``): the answer in chunks, text first word by word."""
                data = b"".join(b"data: " + _encoded(chunk) + b"\r\n\r\n" for chunk in _chunks(payload))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": POLL}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    def _respond(self, path: str, body: JSON) -> tuple[int, JSON]:
        with self._lock:
            self.requests.append(Recorded(path, body))
            if not self._queue:
                self.overrun += 1
                return 500, {"error": {"code": 500, "message": "the script is over", "status": "INTERNAL"}}
            step = self._queue.popleft()
        if isinstance(step, Dynamic):
            step = step.respond(body)
        if isinstance(step, HttpError):
            return step.status, {"error": {"code": step.status, "message": step.message, "status": "ERROR"}}
        return 200, _answer(step)

    def __enter__(self) -> ScriptedGeminiServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)
