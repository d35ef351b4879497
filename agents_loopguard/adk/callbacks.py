"""The guard as per-agent callbacks, for those who prefer ``LlmAgent(before_model_callback=...)`` to a plugin:
:func:`agent_callbacks` gives the keyword arguments of one ``LlmAgent``, each forwarding to the same
:class:`~agents_loopguard.adk.LoopGuardPlugin` (one rule, one place). The agent's ``before_agent_callback`` starts
the invocation's run and its ``after_agent_callback`` ends it.

An agent has no callback for an exception that leaves the run (ADK's plugins have one): catch it around
``Runner.run_async`` and call :meth:`LoopGuardPlugin.failed` so the task ends (a programming error:
``stopped/fatal``), or use the plugin.

>>> from google.adk.agents import LlmAgent
>>> from agents_loopguard import Budget, MemoryStore
>>> from agents_loopguard.adk import LoopGuardPlugin
>>> from agents_loopguard.adk.testing import ScriptedLlm, text
>>> guard = LoopGuardPlugin(budget=Budget(3, 3), store=MemoryStore())
>>> agent = LlmAgent(name="clerk", model=ScriptedLlm([text("hi")]), **agent_callbacks(guard))
>>> sorted(agent_callbacks(guard))[:2]
['after_agent_callback', 'after_model_callback']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from . import wire
from .plugin import LoopGuardPlugin

__all__ = ["agent_callbacks"]


def _listed(callbacks: Any) -> list[Any]:
    """An agent's callback field as a list (ADK takes one callable or a list)."""
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, list) else [callbacks]


def agent_callbacks(plugin: LoopGuardPlugin) -> dict[str, Callable[..., Any]]:
    """The callbacks of one ``LlmAgent`` (``LlmAgent(..., **agent_callbacks(plugin))``), on ``plugin``'s rules."""
    started: dict[str, str] = {}  # invocation id -> the agent whose callbacks started its run
    plugin._guard_plugin = None  # ADK runs every plugin's callbacks before an agent's: none may answer calls

    async def before_agent_callback(callback_context: CallbackContext) -> types.Content | None:
        context = callback_context.get_invocation_context()
        if context.invocation_id in started:
            return None
        root = context.agent if isinstance(context.agent, BaseAgent) else None
        unguarded = [
            agent.name
            for agent in (wire.agents(root) if root is not None else [])
            if isinstance(agent, LlmAgent) and before_model_callback not in _listed(agent.before_model_callback)
        ]
        if unguarded:
            raise ValueError(
                f"agent(s) {unguarded} run without the guard's callbacks: a sub-agent or an agent used as a tool "
                "sends requests and runs tools unseen; give each LlmAgent **agent_callbacks(plugin), or put the "
                "LoopGuardPlugin in App(plugins=[...])"
            )
        started[context.invocation_id] = callback_context.agent_name
        return await plugin.before_run_callback(invocation_context=context)

    async def after_agent_callback(callback_context: CallbackContext) -> None:
        context = callback_context.get_invocation_context()
        if started.get(context.invocation_id) == callback_context.agent_name:
            del started[context.invocation_id]
            await plugin.after_run_callback(invocation_context=context)

    async def before_model_callback(callback_context: CallbackContext, llm_request: LlmRequest) -> LlmResponse | None:
        return await plugin.before_model_callback(callback_context=callback_context, llm_request=llm_request)

    async def after_model_callback(callback_context: CallbackContext, llm_response: LlmResponse) -> LlmResponse | None:
        return await plugin.after_model_callback(callback_context=callback_context, llm_response=llm_response)

    async def on_model_error_callback(
        callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        return await plugin.on_model_error_callback(
            callback_context=callback_context, llm_request=llm_request, error=error
        )

    async def before_tool_callback(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext) -> Any:
        return await plugin.before_tool_callback(tool=tool, tool_args=args, tool_context=tool_context)

    async def after_tool_callback(
        tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: Any
    ) -> Any:
        return await plugin.after_tool_callback(
            tool=tool, tool_args=args, tool_context=tool_context, result=tool_response
        )

    async def on_tool_error_callback(
        tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> Any:
        return await plugin.on_tool_error_callback(tool=tool, tool_args=args, tool_context=tool_context, error=error)

    return {
        "before_agent_callback": before_agent_callback,
        "after_agent_callback": after_agent_callback,
        "before_model_callback": before_model_callback,
        "after_model_callback": after_model_callback,
        "on_model_error_callback": on_model_error_callback,
        "before_tool_callback": before_tool_callback,
        "after_tool_callback": after_tool_callback,
        "on_tool_error_callback": on_tool_error_callback,
    }
