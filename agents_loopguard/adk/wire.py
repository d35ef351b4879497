"""What the ADK adapter reads from and writes into Google ADK's objects, and nothing else: the function-calling
mode of an ``LlmRequest`` as a ``tool_choice``, the guard's choice written back, a response's usage and text, and the
answers the model reads instead of a tool's result. No rule lives here.

>>> from google.adk.models.llm_request import LlmRequest
>>> from google.genai import types
>>> request = LlmRequest(config=types.GenerateContentConfig(tool_config=types.ToolConfig(
...     function_calling_config=types.FunctionCallingConfig(mode="ANY"))))
>>> requested_choice(request)
'required'
>>> write_choice(request, "none"); request.config.tool_config.function_calling_config.mode
<FunctionCallingConfigMode.NONE: 'NONE'>
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from google.adk.agents.base_agent import BaseAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.genai import types

from ..run import ToolSpec
from ..values.canonical import CanonicalError, canonical_json, redact

__all__ = [
    "agents",
    "answer_text",
    "has_function_calls",
    "listed_tools",
    "misfit",
    "pending_call",
    "refusal",
    "refuses_next_call",
    "request_shapes",
    "requested_choice",
    "usage_of",
    "write_choice",
]

_TO_MODE = {"required": "ANY", "none": "NONE", "auto": "AUTO"}


def _calling_config(request: LlmRequest) -> types.FunctionCallingConfig | None:
    config = request.config
    tool_config = config.tool_config if config is not None else None
    return tool_config.function_calling_config if tool_config is not None else None


def requested_choice(request: LlmRequest) -> Any:
    """The request's function-calling mode as a ``tool_choice``: ``ANY`` is ``"required"`` (or the one function
    it allows, by name), ``NONE`` is ``"none"``, ``AUTO`` or nothing is ``None`` (the model chooses)."""
    calling = _calling_config(request)
    mode = calling.mode if calling is not None else None
    if mode is None:
        return None
    name = str(getattr(mode, "value", mode))
    if name == "ANY":
        allowed = calling.allowed_function_names if calling is not None else None
        return allowed[0] if allowed and len(allowed) == 1 else "required"
    return "none" if name == "NONE" else None


def write_choice(request: LlmRequest, choice: Any) -> None:
    """Send ``choice`` (the guard's ``tool_choice``) as the request's function-calling mode."""
    if choice is None:
        return
    config = request.config = request.config or types.GenerateContentConfig()
    tool_config = config.tool_config = config.tool_config or types.ToolConfig()
    calling = tool_config.function_calling_config = tool_config.function_calling_config or types.FunctionCallingConfig()
    if isinstance(choice, str) and choice in _TO_MODE:
        calling.mode = types.FunctionCallingConfigMode(_TO_MODE[choice])
        if choice != "required":
            calling.allowed_function_names = None
    else:  # a forced function by name
        calling.mode = types.FunctionCallingConfigMode.ANY
        calling.allowed_function_names = [str(choice)]


def request_of(request: LlmRequest) -> dict[str, Any]:
    """The request as plain JSON, for the input-token estimate."""
    return {
        "model": request.model,
        "contents": [content.model_dump(mode="json", exclude_none=True) for content in request.contents],
        "config": request.config.model_dump(mode="json", exclude_none=True) if request.config is not None else {},
    }


def max_output_tokens(request: LlmRequest) -> int | None:
    """The bound on the answer's tokens the request carries."""
    return request.config.max_output_tokens if request.config is not None else None


def usage_of(response: Any) -> tuple[int, int] | None:
    """The input and output tokens a response reports."""
    usage = getattr(response, "usage_metadata", None)
    if usage is None:
        return None
    return int(usage.prompt_token_count or 0), int(usage.candidates_token_count or 0)


def has_function_calls(response: LlmResponse) -> bool:
    """True when the model asked for function calls."""
    parts = response.content.parts if response.content is not None else None
    return any(part.function_call is not None for part in parts or [])


def answer_text(response: LlmResponse) -> str | None:
    """The text of a final answer (thoughts left out), or ``None``."""
    parts = response.content.parts if response.content is not None else None
    texts = [part.text for part in parts or [] if part.text and not part.thought]
    return "".join(texts) if texts else None


def refusal(text: str) -> LlmResponse:
    """The answer a request the guard refused gets instead of a model's (it is never sent)."""
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]), turn_complete=True)


def refuses_next_call(context: Any) -> str | None:
    """ADK's own ``RunConfig.max_llm_calls`` refusal of the next call of this invocation, before it is reserved
    (ADK counts a call only after the callbacks ran: without this the refused call would be reserved, never sent).
    Reads ADK's per-invocation counter; ``None`` when the call may go (or the counter cannot be read)."""
    config = getattr(context, "run_config", None)
    limit = getattr(config, "max_llm_calls", 0) or 0
    manager = getattr(context, "_invocation_cost_manager", None)
    made = getattr(manager, "_number_of_llm_calls", None)
    if limit <= 0 or not isinstance(made, int) or made + 1 <= limit:
        return None
    return f"Max number of llm calls limit of `{limit}` exceeded"


def agents(root: BaseAgent) -> Iterator[BaseAgent]:
    """Every agent a run of ``root`` can reach: ``root``, its sub-agents and the agents its tools wrap
    (``AgentTool``), each once."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        agent = todo.pop(0)
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        todo.extend(agent.sub_agents)
        todo.extend(
            wrapped
            for tool in getattr(agent, "tools", None) or []
            if isinstance(wrapped := getattr(tool, "agent", None), BaseAgent)
        )


def listed_tools(root: BaseAgent) -> Iterator[BaseTool]:
    """The tools the agents a run of ``root`` reaches list as tool objects (a plain function is ADK's
    ``FunctionTool`` once the agent runs; a toolset lists its own tools only then)."""
    for agent in agents(root):
        for tool in getattr(agent, "tools", None) or []:
            if isinstance(tool, BaseTool):
                yield tool


def request_shapes(root: BaseAgent) -> Iterator[tuple[str, str | None, int | None]]:
    """Each LLM agent a run of ``root`` reaches: its name, model name and bound on an answer's tokens."""
    for agent in agents(root):
        model = getattr(agent, "model", None)
        if model is not None and model != "":
            name = model.model if isinstance(model, BaseLlm) else str(model)
            config = getattr(agent, "generate_content_config", None)
            yield agent.name, name, config.max_output_tokens if config is not None else None


def misfit(tool: Any) -> Callable[[Mapping[str, Any]], str | None] | None:
    """For a function tool: why the model's arguments cannot be passed to its function (``None`` when they fit);
    ADK's own ``tool_context`` parameter is never the model's to give."""
    func = getattr(tool, "func", None)
    if func is None:
        return None
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    parameters = [p for name, p in signature.parameters.items() if name != "tool_context"]
    signature = signature.replace(parameters=parameters)
    name = tool.name

    def check(args: Mapping[str, Any]) -> str | None:
        try:
            signature.bind(**args)
        except TypeError as exc:
            return f"the arguments do not fit {name}(): {exc}"
        return None

    return check


def pending_call(
    tool: str, spec: ToolSpec, args: Mapping[str, Any], call_id: str | None, *, secrets: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A call waiting for ADK's tool confirmation, as a pause stores it (the shape of every adapter's pause; the
    arguments redacted with the run's ``secrets``)."""
    named = spec.operation_of(args)
    try:
        arguments = canonical_json(redact(dict(args), secrets=secrets)).decode()
    except CanonicalError:
        arguments = str(redact(repr(dict(args)), secrets=secrets))
    return {
        "call_id": call_id or "",
        "tool": tool,
        "kind": spec.kind,
        "arguments": arguments,
        "operation_id": named if isinstance(named, str) else None,
    }
