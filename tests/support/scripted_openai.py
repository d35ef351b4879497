"""A scripted, OpenAI-compatible HTTP server on 127.0.0.1 for deterministic tests.

The real ``openai`` client (and the Agents SDK models built on it) talk to this server over
real HTTP; nothing is monkeypatched. Each request to ``/v1/chat/completions`` or
``/v1/responses`` consumes the next step of a script and is answered in that endpoint's wire
format, as JSON or, when the request asks for ``"stream": true``, as Server-Sent Events::

    with ScriptedOpenAIServer([tool_call("add", {"a": 1}), final_text("done")]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        ...
        assert server.requests[0].body["tool_choice"] == "auto"

Standard library only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

__all__ = [
    "Dynamic",
    "FunctionCall",
    "HttpError",
    "Raw",
    "RecordedRequest",
    "Reply",
    "ScriptedOpenAIServer",
    "Stall",
    "Step",
    "Usage",
    "dynamic",
    "final_text",
    "function_call",
    "http_error",
    "raw",
    "stall",
    "tool_call",
    "tool_calls",
]

log = logging.getLogger(__name__)

Endpoint = Literal["chat", "responses"]
JSON = dict[str, Any]


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Usage:
    """Token counts reported in a success response (``total`` is their sum)."""

    input_tokens: int = 10
    output_tokens: int = 5

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class FunctionCall:
    """One function call the model asks for; ``call_id`` defaults to ``call_<request>_<index>``."""

    name: str
    arguments: str = "{}"
    call_id: str | None = None


@dataclass(frozen=True)
class Reply:
    """A successful model turn: optional assistant text and zero or more function calls."""

    text: str | None = None
    calls: tuple[FunctionCall, ...] = ()
    usage: Usage | None = None


@dataclass(frozen=True)
class HttpError:
    """An HTTP error with an OpenAI-style ``{"error": {...}}`` body."""

    status: int
    message: str
    type: str
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stall:
    """Wait ``seconds`` (cut short when the server stops), then answer with ``then``."""

    seconds: float
    then: Step


@dataclass(frozen=True)
class Raw:
    """Answer exactly this JSON body, whatever the endpoint or ``stream`` flag."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Dynamic:
    """Decide the step when the request arrives: ``fn(request_json) -> step``."""

    fn: Callable[[JSON], Step]


Step = Reply | HttpError | Stall | Raw | Dynamic | Callable[[JSON], Any]
"""A script entry; a bare callable is treated like :class:`Dynamic`."""


def _arguments(arguments: str | Mapping[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(dict(arguments))


def function_call(name: str, arguments: str | Mapping[str, Any] = "{}", call_id: str | None = None) -> FunctionCall:
    """One function call; ``arguments`` is a JSON string or a mapping to encode."""
    return FunctionCall(name=name, arguments=_arguments(arguments), call_id=call_id)


def tool_calls(*calls: FunctionCall, text: str | None = None, usage: Usage | None = None) -> Reply:
    """A turn that calls one or more functions (optionally with assistant text first)."""
    if not calls:
        raise ValueError("tool_calls() needs at least one FunctionCall")
    return Reply(text=text, calls=tuple(calls), usage=usage)


def tool_call(
    name: str,
    arguments: str | Mapping[str, Any] = "{}",
    call_id: str | None = None,
    *,
    usage: Usage | None = None,
) -> Reply:
    """A turn that calls exactly one function."""
    return tool_calls(function_call(name, arguments, call_id), usage=usage)


def final_text(text: str, *, usage: Usage | None = None) -> Reply:
    """A final assistant answer with no tool calls."""
    return Reply(text=text, usage=usage)


_DEFAULT_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Bad request"),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided"),
    403: ("permission_error", None, "Forbidden"),
    404: ("invalid_request_error", None, "Not found"),
    408: ("timeout", None, "Request timed out"),
    409: ("conflict", None, "Conflict"),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached"),
}


def http_error(
    status: int,
    message: str | None = None,
    *,
    type: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    retry_after_ms: int | None = None,
    should_retry: bool | None = None,
) -> HttpError:
    """An HTTP error response.

    ``retry_after_ms`` sets the ``retry-after-ms`` header, which the openai client honours for
    its own retry delay (a value > 0 is needed; 1 makes retries almost instant), and
    ``should_retry`` sets ``x-should-retry``, which overrides the client's status-based choice.
    """
    default_type, default_code, default_message = _DEFAULT_ERRORS.get(
        status, ("server_error", None, "The server had an error while processing your request.")
    )
    all_headers = dict(headers or {})
    if retry_after_ms is not None:
        all_headers["retry-after-ms"] = str(retry_after_ms)
    if should_retry is not None:
        all_headers["x-should-retry"] = "true" if should_retry else "false"
    return HttpError(
        status=status,
        message=message if message is not None else default_message,
        type=type if type is not None else default_type,
        code=code if code is not None else default_code,
        headers=all_headers,
    )


def stall(seconds: float, then: Step | None = None) -> Stall:
    """Sleep before answering; ``then`` defaults to ``final_text("(stalled response)")``."""
    return Stall(seconds=seconds, then=then if then is not None else final_text("(stalled response)"))


def raw(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Raw:
    """An exact JSON body (escape hatch for shapes the helpers do not cover)."""
    return Raw(body=body, status=status, headers=dict(headers or {}))


def dynamic(fn: Callable[[JSON], Step]) -> Dynamic:
    """A step computed from the parsed request body when the request arrives."""
    return Dynamic(fn)


# --------------------------------------------------------------------------- recording


class RecordedRequest(NamedTuple):
    """One HTTP request as received: path, parsed JSON body, lower-cased headers."""

    path: str
    body: Any
    headers: dict[str, str]


# --------------------------------------------------------------------------- wire shapes

_WORDS = re.compile(r"\s*\S+\s*|\s+")


def _text_pieces(text: str) -> list[str]:
    return _WORDS.findall(text) or ([text] if text else [])


def _arg_pieces(arguments: str, size: int = 16) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


@dataclass(frozen=True)
class _Call:
    name: str
    arguments: str
    call_id: str
    item_id: str


@dataclass(frozen=True)
class _Turn:
    """A :class:`Reply` with ids assigned for one request."""

    number: int
    model: str
    text: str | None
    calls: tuple[_Call, ...]
    usage: Usage
    created: int


def _chat_usage(usage: Usage) -> JSON:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _responses_usage(usage: Usage) -> JSON:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def _chat_completion(turn: _Turn) -> JSON:
    message: JSON = {"role": "assistant", "content": turn.text, "refusal": None, "annotations": []}
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls
        ]
    return {
        "id": f"chatcmpl-{turn.number}",
        "object": "chat.completion",
        "created": turn.created,
        "model": turn.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if turn.calls else "stop",
            }
        ],
        "usage": _chat_usage(turn.usage),
        "service_tier": "default",
        "system_fingerprint": None,
    }


def _chat_chunks(turn: _Turn, include_usage: bool) -> Iterator[JSON]:
    base: JSON = {
        "id": f"chatcmpl-{turn.number}",
        "object": "chat.completion.chunk",
        "created": turn.created,
        "model": turn.model,
        "service_tier": "default",
        "system_fingerprint": None,
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: JSON, finish_reason: str | None = None) -> JSON:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [choice]}

    yield chunk({"role": "assistant", "content": "" if turn.text is not None else None, "refusal": None})
    for piece in _text_pieces(turn.text or ""):
        yield chunk({"content": piece})
    for index, call in enumerate(turn.calls):
        head = {"index": index, "id": call.call_id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for piece in _arg_pieces(call.arguments):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if turn.calls else "stop")
    if include_usage:
        yield {**base, "choices": [], "usage": _chat_usage(turn.usage)}


def _message_item(turn: _Turn, status: str, text: str | None = None) -> JSON:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "id": f"msg_{turn.number}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _call_item(call: _Call, status: str, arguments: str | None = None) -> JSON:
    return {
        "id": call.item_id,
        "type": "function_call",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments if arguments is None else arguments,
        "status": status,
    }


def _response_object(turn: _Turn, request: JSON, *, status: str, output: list[JSON], done: bool) -> JSON:
    return {
        "id": f"resp_{turn.number}",
        "object": "response",
        "created_at": turn.created,
        "completed_at": turn.created if done else None,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": request.get("max_tool_calls"),
        "metadata": request.get("metadata") or {},
        "model": turn.model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": request.get("store", True),
        "temperature": request.get("temperature", 1.0),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p", 1.0),
        "truncation": request.get("truncation") or "disabled",
        "usage": _responses_usage(turn.usage) if done else None,
        "user": None,
    }


def _final_output(turn: _Turn) -> list[JSON]:
    output = [] if turn.text is None else [_message_item(turn, "completed", turn.text)]
    return output + [_call_item(c, "completed") for c in turn.calls]


def _response(turn: _Turn, request: JSON) -> JSON:
    return _response_object(turn, request, status="completed", output=_final_output(turn), done=True)


def _response_events(turn: _Turn, request: JSON) -> Iterator[JSON]:
    seq = itertools.count()

    def event(type: str, **fields: Any) -> JSON:
        return {"type": type, "sequence_number": next(seq), **fields}

    pending = _response_object(turn, request, status="in_progress", output=[], done=False)
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    index = 0
    if turn.text is not None:
        item_id = f"msg_{turn.number}"
        empty_part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        full_part = {**empty_part, "text": turn.text}
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        yield event("response.output_item.added", output_index=index, item=_message_item(turn, "in_progress"))
        yield event("response.content_part.added", **where, part=empty_part)
        for piece in _text_pieces(turn.text):
            yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
        yield event("response.output_text.done", **where, text=turn.text, logprobs=[])
        yield event("response.content_part.done", **where, part=full_part)
        yield event("response.output_item.done", output_index=index, item=_message_item(turn, "completed", turn.text))
        index += 1
    for call in turn.calls:
        where = {"item_id": call.item_id, "output_index": index}
        yield event("response.output_item.added", output_index=index, item=_call_item(call, "in_progress", ""))
        for piece in _arg_pieces(call.arguments):
            yield event("response.function_call_arguments.delta", **where, delta=piece)
        yield event("response.function_call_arguments.done", **where, name=call.name, arguments=call.arguments)
        yield event("response.output_item.done", output_index=index, item=_call_item(call, "completed"))
        index += 1
    yield event("response.completed", response=_response(turn, request))


# --------------------------------------------------------------------------- HTTP plumbing


class _ClientGone(Exception):
    """The client closed the connection while we were answering."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ScriptedOpenAI/1.0"
    timeout = 30  # idle keep-alive connections close on their own
    server: _HTTPServer

    disable_nagle_algorithm = True  # headers and body go in two writes: without it, each waits a delayed ACK

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("scripted-openai: " + format, *args)

    def do_POST(self) -> None:
        try:
            self.server.owner._handle(self)
        except _ClientGone:
            self.close_connection = True

    do_GET = do_POST

    # -- low-level writers (raise _ClientGone if the peer went away)

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_json(self, status: int, body: Any, headers: Mapping[str, str], request_id: str) -> None:
        payload = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("x-request-id", request_id)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone from exc

    def send_sse(self, events: Iterable[bytes], request_id: str) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("x-request-id", request_id)
            self.end_headers()
            for data in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone from exc


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # ScriptedOpenAIServer.stop() joins handler threads itself, with a bound

    def __init__(self, owner: ScriptedOpenAIServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("scripted-openai: connection error from %s", client_address, exc_info=True)


def _sse(data: JSON | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def _error_body(message: str, type: str, code: str | None) -> JSON:
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


# --------------------------------------------------------------------------- the server


class ScriptedOpenAIServer:
    """OpenAI-compatible HTTP server answering each model request with the next scripted step.

    Use as a context manager (or call :meth:`start` / :meth:`stop`). ``base_url`` points at
    ``/v1`` for ``openai.OpenAI(base_url=...)``. ``usage`` is the default token usage of
    success responses. Chat Completions streams carry a final usage chunk only when the request
    sets ``stream_options.include_usage`` (as the real API does), unless ``always_stream_usage``.
    """

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        usage: Usage | None = None,
        always_stream_usage: bool = False,
        stop_timeout: float = 5.0,
    ) -> None:
        self._steps: deque[Step] = deque(script)
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._handlers: set[threading.Thread] = set()  # every handler thread, joined by stop() (a handler leaves
        # _connections in finish(), a moment before its thread ends)
        self._usage = usage or Usage()
        self._always_stream_usage = always_stream_usage
        self._stop_timeout = stop_timeout
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> ScriptedOpenAIServer:
        """Bind 127.0.0.1 on a free port and serve in a background thread."""
        if self._httpd is not None:
            raise RuntimeError("server already started")
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=f"scripted-openai:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Wake stalled handlers, stop serving, close open connections and join (bounded)."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None or self._stopping.is_set():
            return
        self._stopping.set()
        deadline = time.monotonic() + self._stop_timeout
        httpd.shutdown()
        with self._lock:
            connections = dict(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        httpd.server_close()
        thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            handlers = set(self._handlers) | set(connections.values())
        for handler_thread in handlers:
            handler_thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- public state

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far (including client retries), oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        """Number of script steps not yet consumed."""
        with self._lock:
            return len(self._steps)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised by dynamic steps (each was answered with a 500)."""
        with self._lock:
            return list(self._errors)

    def add(self, *steps: Step) -> None:
        """Append steps to the script (safe while serving)."""
        with self._lock:
            self._steps.extend(steps)

    # -- internals

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections[conn] = threading.current_thread()
                self._handlers = {t for t in self._handlers if t.is_alive()} | {threading.current_thread()}
            else:
                self._connections.pop(conn, None)

    def _handle(self, handler: _Handler) -> None:
        path = urlsplit(handler.path).path.rstrip("/")
        raw_body = handler.read_body() if handler.command == "POST" else b""
        try:
            body: Any = json.loads(raw_body) if raw_body else None
        except ValueError:
            body = raw_body.decode("utf-8", "replace")
        headers = {name.lower(): value for name, value in handler.headers.items()}
        endpoint: Endpoint | None = (
            "chat" if path.endswith("/chat/completions") else "responses" if path.endswith("/responses") else None
        )
        routed = endpoint is not None and handler.command == "POST" and isinstance(body, dict)
        with self._lock:
            self._requests.append(RecordedRequest(path, body, headers))
            number = len(self._requests)
            step = self._steps.popleft() if routed and self._steps else None
        request_id = f"req_scripted_{number}"

        def fail(status: int, message: str, type: str, code: str | None) -> None:
            no_retry = {"x-should-retry": "false"}
            handler.send_json(status, _error_body(message, type, code), no_retry, request_id)

        if endpoint is None or handler.command != "POST":
            fail(404, f"scripted server has no route {handler.command} {path}", "invalid_request_error", None)
            return
        if not isinstance(body, dict):
            fail(400, "request body is not a JSON object", "invalid_request_error", None)
            return
        if step is None:
            message = f"script exhausted: no step left for request #{number} to {path}"
            fail(500, message, "server_error", "script_exhausted")
            return
        self._answer(handler, step, endpoint, body, number, request_id, fail)

    def _answer(
        self,
        handler: _Handler,
        step: Step,
        endpoint: Endpoint,
        body: JSON,
        number: int,
        request_id: str,
        fail: Callable[[int, str, str, str | None], None],
    ) -> None:
        while isinstance(step, (Stall, Dynamic)) or callable(step):
            if isinstance(step, Stall):
                if self._stopping.wait(step.seconds):
                    handler.close_connection = True
                    return
                step = step.then
                continue
            fn = step.fn if isinstance(step, Dynamic) else step
            try:
                step = fn(body)
            except Exception as exc:
                with self._lock:
                    self._errors.append(exc)
                fail(500, f"scripted step raised {exc!r}", "server_error", "scripted_step_error")
                return
        if isinstance(step, HttpError):
            handler.send_json(step.status, _error_body(step.message, step.type, step.code), step.headers, request_id)
        elif isinstance(step, Raw):
            handler.send_json(step.status, step.body, step.headers, request_id)
        elif isinstance(step, Reply):
            turn = self._turn(step, body, number)
            if body.get("stream"):
                handler.send_sse(self._stream(turn, endpoint, body), request_id)
            elif endpoint == "chat":
                handler.send_json(200, _chat_completion(turn), {}, request_id)
            else:
                handler.send_json(200, _response(turn, body), {}, request_id)
        else:
            message = f"not a script step: {step!r}"
            with self._lock:
                self._errors.append(TypeError(message))
            fail(500, message, "server_error", "scripted_step_error")

    def _turn(self, reply: Reply, body: JSON, number: int) -> _Turn:
        calls = tuple(
            _Call(c.name, c.arguments, c.call_id or f"call_{number}_{i}", f"fc_{number}_{i}")
            for i, c in enumerate(reply.calls)
        )
        return _Turn(
            number=number,
            model=str(body.get("model") or "gpt-4o-mini"),
            text=reply.text,
            calls=calls,
            usage=reply.usage or self._usage,
            created=int(time.time()),
        )

    def _stream(self, turn: _Turn, endpoint: Endpoint, body: JSON) -> Iterator[bytes]:
        if endpoint == "chat":
            options = body.get("stream_options") or {}
            include_usage = self._always_stream_usage or bool(options.get("include_usage"))
            for chunk in _chat_chunks(turn, include_usage):
                yield _sse(chunk)
            yield _sse("[DONE]")
        else:
            for event in _response_events(turn, body):
                yield _sse(event, event["type"])
