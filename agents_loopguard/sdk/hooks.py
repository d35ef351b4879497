"""Run hooks of a guarded run: the stop mark before every handoff, and a count for tools nobody wrapped.

Model attempts are counted by :class:`~agents_loopguard.sdk.GuardedModel` (hooks fire once per turn, not per
attempt) and guarded tools by their own wrapper; the hooks cover what reaches neither: a handoff (checked against
the stop mark before the next agent starts) and local tools that appear only at run time (MCP tools, shell and
computer tools), reserved as reads on ``on_tool_start`` and settled on ``on_tool_end``. A refusal there can only
end the run (the SDK offers no way to skip one tool from a hook). The application's own hooks run after ours.
"""

from __future__ import annotations

from typing import Any

from agents.agent import Agent
from agents.items import ModelResponse, TResponseInputItem
from agents.lifecycle import RunHooks
from agents.run_context import AgentHookContext, RunContextWrapper
from agents.tool import Tool

from ..core import Call, Ticket, Verdict
from ..evidence import Effect, Evidence
from ._internal import GuardedRun, Halt, parse_arguments
from .tools import is_guarded

__all__ = ["GuardHooks"]


class GuardHooks(RunHooks[Any]):
    """The hooks a guarded run attaches (the entry points do it; pass your own with ``hooks=``)."""

    def __init__(self, run: GuardedRun, inner: RunHooks[Any] | None = None) -> None:
        self._run = run
        self._inner = inner
        self._unwrapped: dict[Any, Ticket] = {}

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Any) -> None:
        if self._inner is not None:
            await self._inner.on_agent_start(context, agent)

    async def on_agent_end(self, context: AgentHookContext[Any], agent: Any, output: Any) -> None:
        if self._inner is not None:
            await self._inner.on_agent_end(context, agent, output)

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        if self._inner is not None:
            await self._inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        if self._inner is not None:
            await self._inner.on_llm_end(context, agent, response)

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Any, to_agent: Any) -> None:
        self._run.check_stop_mark()
        if self._inner is not None:
            await self._inner.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Tool) -> None:
        if not is_guarded(tool):
            self._reserve_unwrapped(context, tool)
        if self._inner is not None:
            await self._inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object) -> None:
        ticket = self._unwrapped.pop(_key(context, tool), None)
        if ticket is not None:
            evidence = Evidence(revision=ticket.revision, done=False, effect=Effect.NONE)
            verdict = self._run.guard.settle(ticket, {"status": "ok", "output": result}, lambda _p, _r: evidence)
            if verdict is not None:
                self._run.stop(verdict)
        if self._inner is not None:
            await self._inner.on_tool_end(context, agent, tool, result)

    def _reserve_unwrapped(self, context: RunContextWrapper[Any], tool: Tool) -> None:
        run = self._run
        if run.verdict is not None:
            raise Halt(run.verdict)
        name = getattr(tool, "name", type(tool).__name__)
        raw = getattr(context, "tool_arguments", None)
        args, problem = parse_arguments(name, raw)
        if args is None:
            raise Halt(run.stop(run.invalid_arguments(name, raw, problem)))
        ticket = run.guard.authorize(Call(name, args, "read", None, getattr(context, "tool_call_id", None)))
        if isinstance(ticket, Verdict):
            raise Halt(run.stop(ticket))
        self._unwrapped[_key(context, tool)] = ticket


def _key(context: RunContextWrapper[Any], tool: Tool) -> Any:
    return getattr(context, "tool_call_id", None) or (getattr(tool, "name", ""), id(context))
