"""A scripted chat model for examples and unit tests, without an API key: it answers each request with the next
scripted message and records what each request carried (its ``tool_choice`` and messages).

>>> from langchain_core.messages import AIMessage
>>> model = ScriptedChatModel([calls(("lookup", {"q": "x"})), "Found nothing."])
>>> model.bind_tools([], tool_choice="required").invoke("hi").tool_calls[0]["name"]
'lookup'
>>> model.requests[0]["tool_choice"]
'required'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

__all__ = ["ScriptedChatModel", "calls"]

Reply = AIMessage | str | Callable[[Mapping[str, Any]], "AIMessage | str"] | BaseException


def calls(*named: tuple[str, Mapping[str, Any]], start: int = 0) -> AIMessage:
    """An answer with tool calls ``(name, args)``, their ids ``call_<n>``."""
    tool_calls = [
        {"name": name, "args": dict(args), "id": f"call_{start + i}", "type": "tool_call"}
        for i, (name, args) in enumerate(named)
    ]
    return AIMessage(content="", tool_calls=tool_calls)


class ScriptedChatModel(BaseChatModel):
    """Answers request *n* with ``replies[n]``: a message, a text, a function of the request (``tool_choice``,
    ``messages``) or an exception to raise. Each answer reports 10 input and 5 output tokens."""

    replies: Sequence[Any]
    requests: list[dict[str, Any]] = Field(default_factory=list)
    model_name: str = "scripted"

    def __init__(self, replies: Sequence[Any] = (), **kwargs: Any) -> None:
        super().__init__(replies=list(replies), **kwargs)  # type: ignore[call-arg]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tool_choice=tool_choice, tool_names=[getattr(t, "name", t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        seen = {"tool_choice": kwargs.get("tool_choice"), "messages": list(messages), **kwargs}
        self.requests.append(seen)
        if len(self.requests) > len(self.replies):
            raise IndexError(f"the script has {len(self.replies)} replies; request {len(self.requests)} was made")
        reply = self.replies[len(self.requests) - 1]
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            reply = reply(seen)
        message = reply if isinstance(reply, AIMessage) else AIMessage(content=str(reply))
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        message = message.model_copy(update={"usage_metadata": usage})
        return ChatResult(generations=[ChatGeneration(message=message)])
