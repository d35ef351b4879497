"""What the scripted OpenAI server recorded, read in each API's shape (Chat Completions or Responses), the
``server`` fixture's body, and the HTTP clients of tests that make one per test.

Each ``openai``, ``ChatOpenAI`` or ``google-genai`` client builds an SSL context of its own, and loading the CA
certificates into it takes about 25 ms: more than the rest of a short scripted run. The scripted servers speak plain
HTTP on 127.0.0.1, so nothing is verified with it; the clients below share one default context (:func:`tls`),
otherwise they are the clients' own defaults (``openai.DefaultHttpxClient``: its timeouts, limits, redirects)."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator
from typing import Any

import openai

from tests.support.scripted_openai import ScriptedOpenAIServer

__all__ = [
    "async_http_client",
    "choices_sent",
    "forced",
    "gemini_http_options",
    "http_client",
    "scripted_server",
    "tls",
    "tool_outputs",
]


@functools.cache
def tls() -> ssl.SSLContext:
    """The default SSL context, made once per process."""
    return ssl.create_default_context()


def http_client() -> openai.DefaultHttpxClient:
    """The ``openai`` client's default HTTP client, on the shared SSL context."""
    return openai.DefaultHttpxClient(verify=tls())


def async_http_client() -> openai.DefaultAsyncHttpxClient:
    """The ``openai`` async client's default HTTP client, on the shared SSL context."""
    return openai.DefaultAsyncHttpxClient(verify=tls())


def gemini_http_options() -> dict[str, Any]:
    """``Gemini(client_kwargs=...)``: ``google-genai``'s HTTP clients on the shared SSL context (``verify`` for
    httpx, ``ssl`` for its websocket client; each client keeps the arguments its own signature takes)."""
    from google.genai import types

    shared = {"verify": tls(), "ssl": tls()}
    return {"http_options": types.HttpOptions(client_args={"verify": tls()}, async_client_args=shared)}


def scripted_server() -> Iterator[ScriptedOpenAIServer]:
    """A fresh scripted server, stopped afterwards (a module makes it its ``server`` fixture with
    ``server = pytest.fixture(scripted_server, name="server")``)."""
    with ScriptedOpenAIServer() as srv:
        yield srv


def tool_outputs(api: str, body: dict[str, Any]) -> dict[str, str]:
    """call id -> tool output, as sent in one request."""
    if api == "chat":
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m.get("role") == "tool"}
    items = body["input"] if isinstance(body["input"], list) else []  # a first request's input may be a string
    return {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}


def choices_sent(server: ScriptedOpenAIServer) -> list[Any]:
    """The ``tool_choice`` of every request the server received (``None``: not sent)."""
    return [r.body.get("tool_choice") for r in server.requests]


def forced(api: str, name: str) -> dict[str, Any]:
    """A ``tool_choice`` forcing function ``name``, in the API's own shape."""
    if api == "chat":
        return {"type": "function", "function": {"name": name}}
    return {"type": "function", "name": name}
