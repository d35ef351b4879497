"""A real ``openai`` client whose HTTP transport answers from a script: try a guarded loop, or test your own,
without a key and without a network (the ``MockTransport`` of the client's HTTP library: the client, its retries
and its parsing are the real ones; only the server is scripted).

A script is a list of replies, one per request: :func:`says` (a final answer), :func:`calls` (tool calls), or an
``int`` (an HTTP error status). Every request body the client sent is kept, in order.

>>> import openai
>>> client, requests = scripted_client(says("Hello."))
>>> isinstance(client, openai.OpenAI)
True
>>> client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices[0].message.content
'Hello.'
>>> requests[0]["messages"]
[{'role': 'user', 'content': 'hi'}]
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Literal, overload

import httpx2 as httpx  # the HTTP library the openai client is built on
import openai

__all__ = ["calls", "says", "scripted_client"]

Reply = Mapping[str, Any] | int
"""An assistant message in Chat Completions' shape (:func:`says`, :func:`calls`), or an HTTP error status."""
_USAGE = {"prompt_tokens": 60, "completion_tokens": 20, "total_tokens": 80}


def says(text: str) -> dict[str, Any]:
    """A reply that answers with ``text`` (no tool call)."""
    return {"role": "assistant", "content": text}


def calls(name: str, args: Mapping[str, Any], call_id: str = "call-1") -> dict[str, Any]:
    """A reply that calls tool ``name`` with ``args``."""
    function = {"name": name, "arguments": json.dumps(dict(args))}
    return {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": function}]}


def _chat(reply: Mapping[str, Any]) -> dict[str, Any]:
    finish = "tool_calls" if reply.get("tool_calls") else "stop"
    message = {"content": None, **reply}
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted", "choices": [choice]}


def _responses(reply: Mapping[str, Any]) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if reply.get("content"):
        text = {"type": "output_text", "text": reply["content"], "annotations": []}
        output.append({"type": "message", "id": "msg-1", "role": "assistant", "status": "completed", "content": [text]})
    for call in reply.get("tool_calls") or ():
        function = call["function"]
        output.append(
            {
                "type": "function_call",
                "id": f"fc-{call['id']}",
                "call_id": call["id"],
                "name": function["name"],
                "arguments": function["arguments"],
                "status": "completed",
            }
        )
    usage = {
        "input_tokens": _USAGE["prompt_tokens"],
        "output_tokens": _USAGE["completion_tokens"],
        "total_tokens": _USAGE["total_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    return {
        "id": "resp-1",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "scripted",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def _answer(script: Iterator[Reply], requests: list[dict[str, Any]]) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content or b"{}"))
        reply = next(script, None)
        if reply is None:
            return httpx.Response(500, json={"error": {"message": "the script has no more replies"}})
        if isinstance(reply, int):
            return httpx.Response(reply, json={"error": {"message": f"scripted error {reply}"}})
        if request.url.path.endswith("/responses"):
            return httpx.Response(200, json=_responses(reply))
        return httpx.Response(200, json={**_chat(reply), "usage": _USAGE})

    return answer


@overload
def scripted_client(*replies: Reply, asynchronous: Literal[False] = False) -> tuple[openai.OpenAI, list[Any]]: ...


@overload
def scripted_client(*replies: Reply, asynchronous: Literal[True]) -> tuple[openai.AsyncOpenAI, list[Any]]: ...


def scripted_client(*replies: Reply, asynchronous: bool = False) -> tuple[Any, list[Any]]:
    """A client (``openai.OpenAI``, or ``openai.AsyncOpenAI`` with ``asynchronous=True``) answering each request,
    Chat Completions or Responses, with the next reply of the script, and the list of request bodies it was sent.

    >>> client, requests = scripted_client(calls("lookup", {"order": 7}), 503, says("Shipped."))
    >>> client.responses.create(model="m", input="where is 7?").output[0].name
    'lookup'
    """
    script, requests = iter(replies), list[Any]()
    handler = _answer(script, requests)
    if asynchronous:
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        return openai.AsyncOpenAI(api_key="scripted", base_url="http://scripted.invalid/v1", http_client=http), requests
    sync_http = httpx.Client(transport=httpx.MockTransport(handler))
    return openai.OpenAI(api_key="scripted", base_url="http://scripted.invalid/v1", http_client=sync_http), requests
