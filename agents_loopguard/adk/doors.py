"""The ADK doors the plugin cannot guard, found before anything runs: each is refused with its fix (fail closed).

ADK gives a tool body or a model request paths that no callback of the plugin sees:

* a model client that retries inside one call (``Gemini(retry_options=...)``, ``retry_options`` in the client's or
  the agent's ``http_options``): the attempts after the first would leave unreserved;
* a hosted tool (``google_search``, ``url_context``, Vertex AI search, a built-in code executor...) or a local code
  executor: the model's server, or ADK itself, runs it without a tool call the plugin sees; the explicit opt-out is
  the one of every adapter, ``RunOptions.unguarded`` (``unguarded={"google_search": "why"}``; a code executor by the
  name ``code_executor``), recorded in the task's trace by each run that offers it;
* an ``AgentTool(..., include_plugins=False)``: the nested agent runs without the plugin;
* a live (bidirectional) run (``Runner.run_live``, ``RunConfig(support_cfc=True)``): one connection carries many
  model turns and tool calls;
* a plugin listed before the guard that can answer model or tool calls (ADK stops at the first plugin that
  answers, so the guard would miss reservations or settlements): the guard goes first.

>>> from google.adk.agents import LlmAgent
>>> from google.adk.tools.google_search_tool import google_search
>>> agent = LlmAgent(name="researcher", model="gemini-2.5-flash", tools=[google_search])
>>> print(next(unreachable_tools(agent, {})))  # doctest: +ELLIPSIS
agent 'researcher': tool 'google_search' runs inside the model's server (a hosted tool)...
>>> [name for name, _ in outside_tools(agent)]
['google_search']
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from google.adk.agents.base_agent import BaseAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.base_tool import BaseTool

from .wire import agents

__all__ = ["CODE_EXECUTOR", "client_retries", "early_plugins", "live_run", "outside_tools", "unreachable_tools"]

CODE_EXECUTOR = "code_executor"
"""The name an agent's code executor is opted out by (``unguarded={"code_executor": "why"}``)."""
_HOSTED = "a hosted tool: it runs inside the model's server or ADK's request, with no tool call the guard sees"
_EXECUTOR = "a code executor: it runs the code the model writes with no tool call the guard sees"

_ANSWERING = (
    "before_model_callback",
    "after_model_callback",
    "on_model_error_callback",
    "before_tool_callback",
    "after_tool_callback",
    "on_tool_error_callback",
)
"""The plugin callbacks whose first answer ADK takes (the plugins after it are not called)."""


def _retrying(options: Any) -> bool:
    attempts = getattr(options, "attempts", 0)
    return options is not None and (attempts is None or attempts > 1)


def client_retries(root: BaseAgent) -> Iterator[str]:
    """Each LLM agent a run of ``root`` reaches whose model retries inside one call, and where it is told to."""
    for agent in agents(root):
        model = getattr(agent, "model", None)
        if isinstance(model, BaseLlm):
            if _retrying(getattr(model, "retry_options", None)):
                yield f"agent {agent.name!r}: its model retries inside one call (retry_options)"
            client_options = (getattr(model, "client_kwargs", None) or {}).get("http_options")
            if _retrying(getattr(client_options, "retry_options", None)):
                yield f"agent {agent.name!r}: its model's client retries inside one call (http_options.retry_options)"
        config = getattr(agent, "generate_content_config", None)
        if _retrying(getattr(getattr(config, "http_options", None), "retry_options", None)):
            yield f"agent {agent.name!r}: its requests retry inside one call (generate_content_config.http_options)"


def outside_tools(root: BaseAgent) -> Iterator[tuple[str, str]]:
    """``(name, what it is)`` of each hosted tool and code executor of the agents a run of ``root`` reaches: bodies
    no callback of the plugin sees (a run admits each one ``RunOptions.unguarded`` opts out, recording it)."""
    for agent in agents(root):
        for tool in getattr(agent, "tools", None) or []:
            if isinstance(tool, BaseTool) and _hosted(tool):
                yield tool.name, _HOSTED
        if getattr(agent, "code_executor", None) is not None:
            yield CODE_EXECUTOR, _EXECUTOR


def unreachable_tools(root: BaseAgent, unguarded: Mapping[str, str]) -> Iterator[str]:
    """The doors of the agents a run of ``root`` reaches whose bodies no callback of the plugin sees and nobody opted
    out (``unguarded``): hosted tools, code executors, an ``AgentTool`` without the plugin."""
    for agent in agents(root):
        for tool in getattr(agent, "tools", None) or []:
            if isinstance(tool, AgentTool) and not tool.include_plugins:
                yield (
                    f"agent {agent.name!r}: AgentTool({tool.agent.name!r}, include_plugins=False) runs that agent "
                    "without the guard's plugin, its model requests unreserved: keep include_plugins=True (the "
                    "default), so the nested run shares this task's budget"
                )
            if isinstance(tool, BaseTool) and tool.name not in unguarded and _hosted(tool):
                yield (
                    f"agent {agent.name!r}: tool {tool.name!r} runs inside the model's server (a hosted tool) or "
                    "ADK's request, never through a tool call the guard could reserve (a declaration does not reach "
                    f'it): remove it, or opt it out explicitly with why: unguarded={{{tool.name!r}: "why"}} '
                    "(recorded in the task's trace; its work is counted only as the model request that carries it)"
                )
        if getattr(agent, "code_executor", None) is not None and CODE_EXECUTOR not in unguarded:
            yield (
                f"agent {agent.name!r}: its code executor runs the code the model writes without a tool call the "
                "guard could reserve: give the agent a guarded tool that runs code instead, or opt it out "
                f'explicitly with why: unguarded={{{CODE_EXECUTOR!r}: "why"}} (recorded in the task\'s trace)'
            )


def _hosted(tool: BaseTool) -> bool:
    """A tool that offers the model no function to call (it changes the request instead: a hosted tool)."""
    try:
        return tool._get_declaration() is None
    except Exception:  # a declaration that cannot be built is the tool's own error, raised when ADK builds it
        return False


def live_run(context: Any) -> str | None:
    """Why a run is live (a bidirectional stream the callbacks cannot reserve turn by turn), or ``None``."""
    if getattr(context, "live_request_queue", None) is not None:
        return "a live run (Runner.run_live)"
    config = getattr(context, "run_config", None)
    if getattr(config, "support_cfc", False):
        return "RunConfig(support_cfc=True) (each model call becomes a live connection)"
    return None


def early_plugins(plugins: Sequence[BasePlugin], guard: BasePlugin | None) -> list[str]:
    """The plugins listed before ``guard`` (all of them for per-agent callbacks: ``guard`` is ``None``) that can
    answer a model or tool call: ADK would not ask the guard then."""
    before = list(plugins[: plugins.index(guard)] if guard in plugins else plugins)
    return [
        plugin.name
        for plugin in before
        if any(getattr(type(plugin), name) is not getattr(BasePlugin, name) for name in _ANSWERING)
    ]
