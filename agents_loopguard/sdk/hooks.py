"""Run hooks of a guarded run: the stop mark before every handoff, and a count for tools nobody wrapped.

Model attempts are counted by :class:`~agents_loopguard.sdk.GuardedModel` (hooks fire once per turn, not per
attempt) and guarded tools by their own wrapper; the hooks cover what reaches neither: a handoff (checked against
the stop mark before the next agent starts) and local tools that appear only at run time (shell and computer
tools, MCP tools of a server outside the guarded copy: those of its ``mcp_servers`` reserve themselves in
``call_tool``), reserved as reads on ``on_tool_start`` and settled on ``on_tool_end``. A refusal there can only
end the run (the SDK offers no way to skip one tool from a hook). The application's own hooks run after ours; for a
guarded function tool its ``on_tool_start`` waits until the guard lets the body run, and a call the guard refuses
(or answers from the ledger) reaches neither its ``on_tool_start`` nor its ``on_tool_end``: starts and ends count
the bodies that ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any

from agents.agent import Agent
from agents.items import ModelResponse, TResponseInputItem
from agents.lifecycle import RunHooks
from agents.run_context import AgentHookContext, RunContextWrapper
from agents.tool import FunctionTool, Tool

from ..run import Answer, Executed, GuardedRun
from ._internal import BODY_STARTS, Halt
from .kinds import is_guarded_local
from .mcp import is_guarded_mcp_tool
from .tools import is_guarded

__all__ = ["GuardHooks"]


class GuardHooks(RunHooks[Any]):
    """The hooks a guarded run attaches (the entry points do it; pass your own with ``hooks=``)."""

    def __init__(self, run: GuardedRun, inner: RunHooks[Any] | None = None, *, attached: Any = None) -> None:
        self._run = run
        self._inner = inner
        self.attached = attached
        """The :class:`~agents_loopguard.sdk.LoopGuard` these hooks came from, when they were handed over for the
        application's own ``Runner.run`` (the wrapped default agent runner then guards that run)."""
        self._unwrapped: dict[Any, Generator[Any, Answer, Executed]] = {}

    @property
    def run(self) -> GuardedRun:
        """The guarded run these hooks belong to."""
        return self._run

    @property
    def inner(self) -> RunHooks[Any] | None:
        """The application's own hooks, run after the guard's."""
        return self._inner

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
        stopped = self._run.checkpoint()
        if stopped is not None:
            raise Halt(stopped)
        if self._inner is not None:
            await self._inner.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Tool) -> None:
        in_invoker = is_guarded(tool) or self._composed_function(tool)
        if not (in_invoker or is_guarded_local(tool) or is_guarded_mcp_tool(agent, tool)):
            self._reserve_unwrapped(context, tool)
        inner, call_id = self._inner, _call_id(context)
        if inner is None:
            return
        if in_invoker and call_id is not None:  # the guard decides inside the invoker: start when the body runs
            BODY_STARTS.setdefault(self._run, {})[call_id] = lambda: inner.on_tool_start(context, agent, tool)
            return
        await inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object) -> None:
        steps = self._unwrapped.pop(_key(context, tool), None)
        if steps is not None:
            with contextlib.suppress(StopIteration):  # the execution settles: bounded by the progress rules
                steps.send(Answer(result))
        call_id = _call_id(context)
        held = BODY_STARTS.get(self._run, {}).pop(call_id, None) if call_id is not None else None
        if self._inner is not None and held is None:  # held: the body never ran (refused, or a ledger replay)
            await self._inner.on_tool_end(context, agent, tool, result)

    def _composed_function(self, tool: Tool) -> bool:
        """A function tool of a graph guarded before a durable engine wrapped it (every function tool of a guarded
        copy is guarded; the engine's own invoker around it hides the guard's mark)."""
        return isinstance(tool, FunctionTool) and bool(getattr(self.attached, "composed", False))

    def _reserve_unwrapped(self, context: RunContextWrapper[Any], tool: Tool) -> None:
        """A tool nobody wrapped (MCP, shell, computer...) is proposed and reserved as a read before it runs; the
        SDK offers no way to skip one tool from a hook, so a refusal ends the run."""
        run = self._run
        name = getattr(tool, "name", type(tool).__name__)
        spec = run.declaration(name)  # undeclared, or declared by name (RunOptions.tools)
        call = run.propose(spec, name, getattr(context, "tool_arguments", None), _call_id(context))
        if isinstance(call, Executed):
            assert call.verdict is not None, "a proposal that is not a call carries its verdict"
            raise Halt(run.stop(call.verdict))
        steps = run.execute(spec, call)
        try:
            next(steps)  # authorized and reserved: the tool may run now
        except StopIteration as refused:
            executed: Executed = refused.value
            if executed.verdict is None:  # a durable engine's replay of a recorded execution: nothing to reserve
                return
            raise Halt(run.stop(executed.verdict)) from None
        self._unwrapped[_key(context, tool)] = steps


def _call_id(context: RunContextWrapper[Any]) -> str | None:
    return getattr(context, "tool_call_id", None)


def _key(context: RunContextWrapper[Any], tool: Tool) -> Any:
    return _call_id(context) or (getattr(tool, "name", ""), id(context))
