"""MCP tools of an ADK run (``McpToolset``): judged like every MCP tool, by :mod:`agents_loopguard.run.listed`.

ADK's ``McpTool`` calls the server's ``call_tool`` once in its ``run_async`` (ADK 2.13 retries nothing there), so
the plugin's ``before_tool_callback`` is the last point before the body, as for any ADK tool: a tool declared by
name (the plugin's ``tools=``, or ``RunOptions.tools``) is guarded as declared. An undeclared one is a read only
when a trusted server annotates it ``readOnlyHint: true`` (ADK names no server: a toolset is known by its
``tool_name_prefix``, the name to put in ``mcp_trusted``) or when the user opts it out (``unguarded=``); any
other is a possible write. When the run starts, the plugin lists every ``McpToolset`` of the agent tree and
refuses the run if one lists such a tool; a tool a server adds later is refused when called (the model reads why).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.mcp_tool.mcp_tool import McpTool
from google.adk.tools.mcp_tool.mcp_toolset import McpToolset

from ..run import GuardedRun, ToolSpec
from ..run.listed import NotDeclared, listing_refusal

__all__ = ["judge_mcp_tool", "listing_refusals"]


def _server(tool: McpTool) -> str | None:
    """The toolset's name as ADK knows it: the prefix it put before the server's tool name (``None``: no prefix)."""
    raw = tool.raw_mcp_tool.name
    if tool.name == raw or not tool.name.endswith("_" + raw):
        return None
    return tool.name[: -len(raw) - 1]


def judge_mcp_tool(run: GuardedRun, tool: BaseTool, declared: Mapping[str, ToolSpec]) -> ToolSpec | NotDeclared | None:
    """What the guard makes of ``tool`` when it is an MCP tool (``None`` otherwise): its declaration by name in
    ``declared`` (the plugin's ``tools=``) or the run's, else the rule of :mod:`agents_loopguard.run.listed`."""
    if not isinstance(tool, McpTool):
        return None
    own = declared.get(tool.name)
    if own is not None:
        return own
    return run.listed_tool(tool.name, getattr(tool.raw_mcp_tool, "annotations", None), server=_server(tool))


def _toolsets(agent: BaseAgent) -> Iterator[tuple[BaseAgent, McpToolset]]:
    for tool in getattr(agent, "tools", None) or []:
        if isinstance(tool, McpToolset):
            yield agent, tool
    for sub_agent in agent.sub_agents:
        yield from _toolsets(sub_agent)


async def listing_refusals(
    run: GuardedRun, root: BaseAgent, context: Any, declared: Mapping[str, ToolSpec]
) -> list[str]:
    """Each ``McpToolset`` of the tree under ``root`` listed now: one refusal per toolset that lists tools that
    may change the world and nobody declared (empty: the run may start)."""
    refusals = []
    for agent, toolset in _toolsets(root):
        tools = await toolset.get_tools_with_prefix(ReadonlyContext(context))
        refused = [j for t in tools if isinstance(j := judge_mcp_tool(run, t, declared), NotDeclared)]
        if refused:
            server = toolset.tool_name_prefix
            refusals.append(f"agent {agent.name!r}: {listing_refusal(refused, server)}")
    return refusals
