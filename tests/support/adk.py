"""The Google ADK column of the run-rule matrix (tests/support/adapters.py): a scenario through
:func:`agents_loopguard.adk.run_guarded` with ADK's own ``Gemini`` model, the real ``google-genai`` client over HTTP
against :class:`~tests.support.scripted_gemini.ScriptedGeminiServer`.

Translation of the neutral scenario: a forced function is ``mode=ANY`` with that one allowed name, ``"required"``
is ``ANY``, ``"auto"`` is ``AUTO``; the recorded choice of each request reads its mode back the same way. ADK has
no ``reset_tool_choice``: the plugin's ``reset_forced_function`` (on by default) sends a forced function that ran
as ``AUTO``, as the raw loop does.

By design the Gemini wire carries a call's arguments as a JSON object (``functionCall.args``): text that is not
one never reaches ADK; ``google-genai`` refuses the whole response (a pydantic ``ValidationError``), which ends the
task ``stopped/fatal`` and is raised (pinned in tests/test_run_rules.py where the other adapters answer
``invalid_call``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.google_llm import Gemini
from google.genai import types

from agents_loopguard import Outcome
from agents_loopguard.adk import guarded_tool, run_guarded
from tests.support.adapters import Calls, Fail, Obey, Ran, Say, Step, Tool, call_id
from tests.support.scripted_gemini import Dynamic, HttpError, Recorded, Reply, ScriptedGeminiServer
from tests.support.wire import gemini_http_options

GEMINI = "gemini-2.5-flash"
os.environ.setdefault("GOOGLE_API_KEY", "scripted")  # the scripted endpoint takes any key


def choice_of(body: Mapping[str, Any]) -> Any:
    """A request's function-calling mode as the neutral scenario writes a ``tool_choice``."""
    calling = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
    mode = calling.get("mode")
    if mode is None:
        return None
    if mode == "ANY":
        allowed = calling.get("allowedFunctionNames") or []
        return allowed[0] if len(allowed) == 1 else "required"
    return {"NONE": "none", "AUTO": "auto"}.get(mode, mode)


def _config(tool_choice: Any, max_output_tokens: int | None) -> types.GenerateContentConfig:
    config = types.GenerateContentConfig(max_output_tokens=max_output_tokens)
    if tool_choice is not None:
        if tool_choice in ("required", "auto", "none"):
            mode = {"required": "ANY", "auto": "AUTO", "none": "NONE"}[tool_choice]
            calling = types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode(mode))
        else:
            calling = types.FunctionCallingConfig(mode="ANY", allowed_function_names=[tool_choice])
        config.tool_config = types.ToolConfig(function_calling_config=calling)
    return config


def _args(raw: Mapping[str, Any] | str) -> Any:
    """The wire carries arguments as a JSON object; raw text that is one is sent as one, other text as it is."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return dict(raw)


def _reply(turn: int, step: Calls | Say) -> Reply:
    if isinstance(step, Say):
        return Reply(text=step.text)
    pairs = tuple((name, _args(args)) for name, args in step.calls)
    return Reply(calls=pairs, call_ids=tuple(call_id(turn, i) for i in range(len(pairs))))


def _step(turn: int, step: Step) -> Any:
    if isinstance(step, Fail):
        return HttpError(step.status)
    if isinstance(step, Obey):
        return Dynamic(lambda body: _reply(turn, step.respond(choice_of(body))))
    return _reply(turn, step)


def _told(response: Any) -> str:
    """What the model read, as the other adapters' text: ADK wraps a tool's value as ``{"result": ...}`` and the
    plugin's refusals are ``{"error": ...}``."""
    if isinstance(response, dict) and len(response) == 1 and set(response) <= {"result", "error"}:
        value = next(iter(response.values()))
        return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(response)


def _outputs(request: Recorded) -> dict[str, str]:
    return {str(r.get("id")): _told(r.get("response")) for r in request.function_responses}


def for_adk(tool: Tool) -> Any:
    return guarded_tool(tool.fn, **tool.declaration())


def run_adk(
    steps: Sequence[Step],
    tools: Sequence[Tool],
    tool_choice: Any,
    max_output_tokens: int | None,
    reset_forced_function: bool,
    options: Any,
) -> Ran:
    with ScriptedGeminiServer([_step(turn, step) for turn, step in enumerate(steps, start=1)]) as server:
        agent = LlmAgent(
            name="clerk",
            model=Gemini(model=GEMINI, base_url=server.base_url, client_kwargs=gemini_http_options()),
            tools=[for_adk(tool) for tool in tools],
            generate_content_config=_config(tool_choice, max_output_tokens),
        )

        async def main() -> Outcome:
            return await run_guarded(agent, "go", reset_forced_function=reset_forced_function, **options)

        outcome = asyncio.run(main())
        requests = list(server.requests)
    return Ran(outcome, [choice_of(r.body) for r in requests], [_outputs(r) for r in requests])


def wire_cannot_carry(adapter: str, arguments: Any) -> bool:
    """True for the ADK column and call arguments that are text but not a JSON object (see the module's note)."""
    if adapter != "adk" or not isinstance(arguments, str):
        return False
    return not isinstance(_args(arguments), dict)
