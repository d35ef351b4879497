"""What the scripted OpenAI server recorded, read in each API's shape (Chat Completions or Responses), and the
``server`` fixture's body."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.support.scripted_openai import ScriptedOpenAIServer

__all__ = ["choices_sent", "forced", "scripted_server", "tool_outputs"]


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
