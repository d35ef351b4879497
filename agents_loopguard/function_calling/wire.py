"""The two OpenAI API styles as the loop reads and writes them: Chat Completions and the Responses API.

Pure translation: how a request names its conversation and its output bound, how a response carries its text and
its function calls, how a tool's output goes back into the conversation. No rule of the guard lives here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .tools import GuardedTool

__all__ = ["Api", "Chat", "Proposed", "Responses", "Turn", "content", "dump"]


@dataclass(frozen=True)
class Proposed:
    call_id: str
    name: str
    arguments: str | None
    """The raw JSON text; ``None`` when the item is not a function call."""


@dataclass(frozen=True)
class Turn:
    text: str | None
    calls: tuple[Proposed, ...]
    finish: str | None


def dump(item: Any) -> Any:
    return item.model_dump(mode="json", exclude_none=True) if hasattr(item, "model_dump") else item


class Chat:
    """Chat Completions: ``messages``, ``tools[].function``, ``message.tool_calls``, ``role: tool`` outputs."""

    conversation_key = "messages"
    max_tokens_key = "max_completion_tokens"

    @staticmethod
    def endpoint(client: Any) -> Callable[..., Any]:
        return client.chat.completions.create  # type: ignore[no-any-return]

    @staticmethod
    def spec(tool: GuardedTool) -> dict[str, Any]:
        return tool.chat_spec()

    @staticmethod
    def read(response: Any) -> Turn | str:
        choices = getattr(response, "choices", None)
        if not choices:
            return "the response has no choices"
        message = choices[0].message
        calls = []
        for call in getattr(message, "tool_calls", None) or []:
            function = getattr(call, "function", None)
            if getattr(call, "type", "function") == "function" and function is not None:
                calls.append(Proposed(call.id, function.name, function.arguments))
            else:
                calls.append(Proposed(call.id, getattr(getattr(call, "custom", None), "name", ""), None))
        text = message.content if message.content is not None else getattr(message, "refusal", None)
        return Turn(text, tuple(calls), choices[0].finish_reason)

    @staticmethod
    def usage(response: Any) -> tuple[int, int] | None:
        usage = getattr(response, "usage", None)
        return None if usage is None else (usage.prompt_tokens, usage.completion_tokens)

    @staticmethod
    def append_turn(conversation: list[Any], response: Any) -> None:
        """The assistant message as the next request sends it back. A message with tool calls and no text carries
        no ``content`` (the API allows it; a ``content: null`` costs the openai client a walk of the whole content
        type on every later request)."""
        message = response.choices[0].message
        entry: dict[str, Any] = {"role": "assistant"}
        if message.content is not None or not message.tool_calls:
            entry["content"] = message.content
        if message.tool_calls:
            entry["tool_calls"] = [dump(call) for call in message.tool_calls]
        conversation.append(entry)

    @staticmethod
    def append_output(conversation: list[Any], call_id: str, content: str) -> None:
        conversation.append({"role": "tool", "tool_call_id": call_id, "content": content})


class Responses:
    """The Responses API: ``input`` items, flat ``tools``, ``function_call`` items, ``function_call_output``."""

    conversation_key = "input"
    max_tokens_key = "max_output_tokens"

    @staticmethod
    def endpoint(client: Any) -> Callable[..., Any]:
        return client.responses.create  # type: ignore[no-any-return]

    @staticmethod
    def spec(tool: GuardedTool) -> dict[str, Any]:
        return tool.responses_spec()

    @staticmethod
    def read(response: Any) -> Turn | str:
        output = getattr(response, "output", None)
        if output is None:
            return "the response has no output"
        calls = []
        for item in output:
            kind = getattr(item, "type", None)
            if kind == "function_call":
                calls.append(Proposed(item.call_id, item.name, item.arguments))
            elif kind == "custom_tool_call":
                calls.append(Proposed(item.call_id, item.name, None))
        text = getattr(response, "output_text", None) or None
        return Turn(text, tuple(calls), getattr(response, "status", None))

    @staticmethod
    def usage(response: Any) -> tuple[int, int] | None:
        usage = getattr(response, "usage", None)
        return None if usage is None else (usage.input_tokens, usage.output_tokens)

    @staticmethod
    def append_turn(conversation: list[Any], response: Any) -> None:
        conversation.extend(dump(item) for item in response.output)

    @staticmethod
    def append_output(conversation: list[Any], call_id: str, content: str) -> None:
        conversation.append({"type": "function_call_output", "call_id": call_id, "output": content})


Api = type[Chat] | type[Responses]


def content(output: Any) -> str:
    """A tool output as the text the model reads."""
    if isinstance(output, str):
        return output
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    return json.dumps(output, ensure_ascii=False, default=str)
