"""MCP servers of a guarded run (``Agent(mcp_servers=[...])``): the guard sits in the server's ``call_tool``.

The SDK turns each tool an MCP server lists into a ``FunctionTool`` at every turn, whose invoker ends in
``server.call_tool(name, arguments)``: the one call that reaches the server, under any failure policy, approval or
guardrail the SDK stacks above it. The guarded copy of an agent (:func:`~agents_loopguard.sdk.graph.guard_agent`)
holds a :class:`GuardedMCPServer` around each of its servers, so that call is reserved right before it leaves:

* a tool declared by name (``RunOptions.tools``, :func:`~agents_loopguard.run.declare_tool`) is guarded as
  declared: a write through the ledger (run at most once per operation id; its ``verify(args, result)`` gets the
  ``CallToolResult`` as its JSON dict: ``content``, ``structuredContent``, ``isError``);
* an undeclared tool is judged by :mod:`agents_loopguard.run.listed` from its latest listing: a trusted server's
  ``readOnlyHint: true`` or the user's opt-out (``unguarded={name: why}``) runs as an unverified read; any other is a
  possible write. The first listing of a server in a run refuses the run (a ``UserError`` naming the declaration to
  add, before the model is asked); a tool a server adds later is refused when called (the model reads why).

The SDK's own retries (``max_retry_attempts``) run inside ``call_tool``, under one reservation: a run whose agents
use a server with retries is refused when it starts (the guard retries a declared tool itself: ``retry=``).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

from agents import Agent
from agents.exceptions import UserError
from agents.mcp import MCPServer
from agents.mcp._logging import get_mcp_server_log_name
from agents.mcp.util import MCPToolMetaContext
from agents.tool import Tool
from mcp.types import CallToolResult, TextContent

from ..run import Executed, GuardedRun
from ..run.listed import NotDeclared, listing_refusal
from ._internal import ACTIVE_RUN, execute

__all__ = ["GuardedMCPServer", "check_servers", "guard_servers", "is_guarded_mcp_tool"]

_CALL_ID: ContextVar[str | None] = ContextVar("agents_loopguard_mcp_call_id", default=None)
"""The SDK's tool call id, caught by the meta resolver the SDK calls right before ``call_tool`` (same task)."""


class GuardedMCPServer(MCPServer):
    """An SDK MCP server whose ``call_tool`` runs under the active guarded run (see the module); everything else
    is the wrapped server's (``connect`` and ``cleanup`` included: you connect the server you made).

    >>> from agents.mcp import MCPServerStdio
    >>> server = MCPServerStdio(params={"command": "true"}, name="payments")
    >>> guarded = GuardedMCPServer(server)
    >>> guarded.name, guarded.server is server, guarded.max_retry_attempts
    ('payments', True, 0)
    """

    def __init__(self, server: MCPServer) -> None:  # no super().__init__: every setting is the wrapped server's
        self.server = server
        self._annotations: dict[str, Any] = {}
        self._listed: weakref.WeakSet[GuardedRun] = weakref.WeakSet()
        self.tool_meta_resolver = self._resolve_meta

    def __getattr__(self, name: str) -> Any:
        if name == "server":  # not set yet (a copy being built): never recurse
            raise AttributeError(name)
        return getattr(self.server, name)

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def cached_tools(self) -> Any:
        return self.server.cached_tools

    def _resolve_meta(self, context: MCPToolMetaContext) -> Any:
        """The wrapped server's meta resolver (the SDK calls it right before ``call_tool``), after catching the
        SDK's call id for the reservation."""
        _CALL_ID.set(getattr(context.run_context, "tool_call_id", None))
        inner = getattr(self.server, "tool_meta_resolver", None)
        return inner(context) if inner is not None else None

    async def connect(self) -> None:
        await self.server.connect()  # type: ignore[no-untyped-call]

    async def cleanup(self) -> None:
        await self.server.cleanup()  # type: ignore[no-untyped-call]

    async def list_prompts(self) -> Any:
        return await self.server.list_prompts()

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self.server.get_prompt(name, arguments)

    async def list_resources(self, cursor: str | None = None) -> Any:
        return await self.server.list_resources(cursor)

    async def list_resource_templates(self, cursor: str | None = None) -> Any:
        return await self.server.list_resource_templates(cursor)

    async def read_resource(self, uri: str) -> Any:
        return await self.server.read_resource(uri)

    def _get_needs_approval_for_tool(self, tool: Any, agent: Any) -> Any:
        return self.server._get_needs_approval_for_tool(tool, agent)

    def _get_failure_error_function(self, agent_failure_error_function: Any) -> Any:
        return self.server._get_failure_error_function(agent_failure_error_function)

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[Any]:
        """The wrapped server's tools; each is judged from this listing. In a guarded run, the server's first
        listing refuses the run when it lists a tool that may change the world and nobody declared."""
        tools = await self.server.list_tools(run_context, agent)
        self._annotations = {tool.name: getattr(tool, "annotations", None) for tool in tools}
        run = ACTIVE_RUN.get()
        if run is not None and run not in self._listed:
            refused = [j for t in tools if isinstance(j := self._judge(run, t.name), NotDeclared)]
            if refused:
                raise UserError(listing_refusal(refused, self.server.name))
            self._listed.add(run)
        return list(tools)

    def _judge(self, run: GuardedRun, tool: str) -> Any:
        return run.listed_tool(tool, self._annotations.get(tool), server=self.server.name)

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        """The guarded call: the upstream's result, the ledger's stored one, or an error result the model reads."""
        run = ACTIVE_RUN.get()
        if run is None:  # outside a guarded run: the server's own call
            return await self.server.call_tool(tool_name, arguments, meta)
        judged = self._judge(run, tool_name)
        if isinstance(judged, NotDeclared):
            return _refused(run.refuse_undeclared(judged))
        call = run.propose(judged, tool_name, dict(arguments or {}), _CALL_ID.get())
        if isinstance(call, Executed):
            return _refused(call)

        async def body() -> dict[str, Any]:
            result = await self.server.call_tool(tool_name, arguments, meta)
            dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            return dumped

        executed = await execute(run, judged, call, body)
        if executed.error is not None:
            raise executed.error
        if executed.message is not None:
            return _refused(executed)
        try:
            return CallToolResult.model_validate(executed.output)
        except ValueError:  # a stored result of another shape: its text
            return CallToolResult(content=[TextContent(type="text", text=str(executed.output))])


def _refused(executed: Executed) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=str(executed.message))], is_error=True)


def guard_servers(servers: Iterable[MCPServer]) -> list[MCPServer]:
    """Each server wrapped once (a guarded server stays as it is)."""
    return [s if isinstance(s, GuardedMCPServer) else GuardedMCPServer(s) for s in servers]


def check_servers(agent: Agent[Any]) -> None:
    """Refuse a server whose SDK retries would re-send a call under one reservation (``UserError``, the fix named).

    >>> from agents.mcp import MCPServerStdio
    >>> check_servers(Agent(name="a", mcp_servers=[MCPServerStdio(params={"command": "true"}, name="pay",
    ...                                                             max_retry_attempts=2)]))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    agents.exceptions.UserError: MCP server 'pay' of agent 'a' retries calls itself (max_retry_attempts=2): ...
    """
    for server in agent.mcp_servers:
        retries = getattr(server, "max_retry_attempts", 0)
        if retries != 0:
            raise UserError(
                f"MCP server {server.name!r} of agent {agent.name!r} retries calls itself (max_retry_attempts="
                f"{retries}): a retried call would reach the server again under one reservation. Build it "
                "with max_retry_attempts=0 and let the guard retry a declared tool "
                "(declare_tool(..., retry=RetryPolicy(...)))"
            )


def is_guarded_mcp_tool(agent: Any, tool: Tool) -> bool:
    """True for a tool the SDK built from one of ``agent``'s guarded MCP servers (its calls reserve themselves)."""
    binding = getattr(tool, "_mcp_tool_binding", None)
    if not binding:
        return False
    servers = getattr(agent, "mcp_servers", None) or []
    return any(isinstance(s, GuardedMCPServer) and get_mcp_server_log_name(s.name) == binding[0] for s in servers)
