"""The guarded copy of an agent graph, and the whole graph counting: nested runs included.

A guarded run never runs the application's agents: it runs copies whose models are wrapped (every attempt reserved)
and whose plain function tools are guarded as reads, handoff targets included; the application's agents, tools and
settings are untouched. Agents also run *inside* a run: an agent used as a tool (``agent.as_tool()``, which starts
a nested ``Runner.run`` with the original agent, with or without a ``run_config``) and a ``Runner.run`` that a tool
body starts itself. Every one of them goes through the SDK's default agent runner, so the adapter installs a
delegating runner there: inside a guarded run (the contextvar :data:`~._internal.ACTIVE_RUN` is set) a nested run is
given the guarded copy of its agent, the guarded model provider and the guard's hooks, so its model attempts and
tool executions count against the same task, under the same stop mark and budget. Outside a guarded run it only
delegates. (``set_default_agent_runner`` is the SDK's one interception point for nested runs, public in every
supported minor: openai-agents 0.22 to 0.24.)
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, FunctionTool, Handoff, RunConfig, RunState, Tool
from agents.models.interface import Model
from agents.result import RunResult, RunResultStreaming
from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner

from ..run import GuardedRun
from ._internal import ACTIVE_RUN
from .hooks import GuardHooks
from .kinds import guard_local
from .model import GuardedModel, GuardedModelProvider, guard_inside
from .private import agent_of_tool, set_agent_of_tool, state_context
from .tools import guard_undeclared

__all__ = ["guard_agent", "guard_config", "install_nested_guard", "is_copy", "restore_on"]

_COPY = "_loopguard_copy"
_COPIES: dict[int, tuple[weakref.ref[Agent[Any]], tuple[int, ...], Agent[Any]]] = {}
"""id(application agent) -> (the agent, weakly; the identity of its fields; its guarded copy). Agents are not
hashable, so the entry is dropped by the weak reference's callback when the agent goes. A copy holds no run: its
models find the active run when called, its tools through the contextvar, so every run of an unchanged graph
shares it."""


def _guard_model(model: Any) -> Any:
    return guard_inside(model, GuardedModel) if isinstance(model, Model) else model


def _shape(agent: Agent[Any]) -> tuple[int, ...]:
    """The identity of what a copy is made of: every field's object, and the tools and handoffs listed (a list
    changed in place changes it too)."""
    return (
        *(id(value) for value in vars(agent).values()),
        *(id(tool) for tool in agent.tools),
        *(id(handoff) for handoff in agent.handoffs),
    )


def guard_agent(agent: Agent[Any]) -> Agent[Any]:
    """The guarded copy of ``agent`` and of every agent it can hand off to (lazily for ``Handoff`` objects), made
    once per unchanged agent: models wrapped, plain function tools guarded as reads. The application's agent is
    untouched.

    >>> from agents import Agent
    >>> agent = Agent(name="a")
    >>> guard_agent(agent) is guard_agent(agent), guard_agent(agent) is agent
    (True, False)
    """
    if getattr(agent, _COPY, False):
        return agent
    shape = _shape(agent)
    key = id(agent)
    cached = _COPIES.get(key)
    if cached is not None and cached[0]() is agent and cached[1] == shape:
        return cached[2]
    clone = agent.clone(model=_guard_model(agent.model), model_settings=agent.model_settings)
    setattr(clone, _COPY, True)
    owner = weakref.ref(agent, lambda _gone, key=key: _forget(key))  # type: ignore[misc]
    _COPIES[key] = (owner, shape, clone)  # before the handoffs: a graph with cycles reaches this copy again
    clone.tools = [_guard_tool(t) for t in agent.tools]
    clone.handoffs = [_guard_handoff(h) for h in agent.handoffs]
    clone.get_all_tools = _guarding(clone.get_all_tools)  # type: ignore[method-assign,assignment]
    return clone


def _guard_tool(tool: Tool) -> Tool:
    """A tool of a guarded copy: a function tool guarded at its invoker, an SDK local tool at its executor. The
    copy of an agent used as a tool names the guarded copy of that agent: a state the SDK restores resolves the
    nested run's agents through it (a nested run resumed after an approval then runs guarded)."""
    if not isinstance(tool, FunctionTool):
        local: Tool = guard_local(tool)
        return local
    guarded = guard_undeclared(tool)
    nested = agent_of_tool(tool)
    if isinstance(nested, Agent):
        guarded = dataclasses.replace(guarded) if guarded is tool else guarded  # never the application's object
        set_agent_of_tool(guarded, guard_agent(nested))
    return guarded


def _guarding(get_all_tools: Callable[[Any], Awaitable[list[Tool]]]) -> Callable[[Any], Awaitable[list[Tool]]]:
    """``Agent.get_all_tools`` of a guarded copy: the function tools that appear only at run time (an MCP server's,
    an override's) are guarded at their invoker, as the copy's own are (the last point before their body)."""

    async def get_all_tools_guarded(run_context: Any) -> list[Tool]:
        return [_guard_tool(t) for t in await get_all_tools(run_context)]

    return get_all_tools_guarded


def is_copy(agent: Any) -> bool:
    """True for a guarded copy made by :func:`guard_agent`."""
    return bool(getattr(agent, _COPY, False))


def _forget(key: int) -> None:
    entry = _COPIES.get(key)
    if entry is not None and entry[0]() is None:
        del _COPIES[key]


def _guard_handoff(target: Agent[Any] | Handoff[Any, Any]) -> Any:
    if isinstance(target, Agent):
        return guard_agent(target)
    if not isinstance(target, Handoff):
        return target
    invoke = target.on_invoke_handoff

    async def on_invoke_handoff(ctx: Any, input_json: str) -> Any:
        agent = await invoke(ctx, input_json)
        return guard_agent(agent) if isinstance(agent, Agent) else agent

    return dataclasses.replace(target, on_invoke_handoff=on_invoke_handoff)


def guard_config(run_config: RunConfig | dict[str, Any] | None, run: GuardedRun) -> RunConfig:
    """``run_config`` with its model and its model provider wrapped for ``run`` (a copy; already wrapped: as is)."""
    config = run_config if isinstance(run_config, RunConfig) else RunConfig(**(run_config or {}))
    provider = config.model_provider
    if isinstance(provider, GuardedModelProvider) and provider.run is run:
        return config
    return dataclasses.replace(
        config, model=_guard_model(config.model), model_provider=GuardedModelProvider(provider, run)
    )


async def restore_on(copy: Agent[Any], state: RunState[Any]) -> RunState[Any]:
    """``state`` restored against the guarded ``copy`` of its agent graph (the SDK resumes with the state's own
    agents, matched by name), keeping its context."""
    context = state_context(state)
    if context is None:  # this SDK keeps it elsewhere: the state's JSON carries it (see .private)
        return await RunState.from_json(copy, state.to_json())
    data = state.to_json(context_serializer=lambda _context: {})
    return await RunState.from_json(copy, data, context_override=context)


def _nested(run: GuardedRun, agent: Agent[Any], kwargs: dict[str, Any]) -> tuple[Agent[Any], dict[str, Any]]:
    hooks = kwargs.get("hooks")
    if not (isinstance(hooks, GuardHooks) and hooks.run is run):
        kwargs["hooks"] = GuardHooks(run, hooks)
    kwargs["run_config"] = guard_config(kwargs.get("run_config"), run)
    return guard_agent(agent), kwargs


def _attached(kwargs: dict[str, Any]) -> Any:
    """The LoopGuard whose hooks a ``Runner.run`` was given, if any."""
    hooks = kwargs.get("hooks")
    return hooks.attached if isinstance(hooks, GuardHooks) else None


class _NestedRunGuard(AgentRunner):
    """The SDK's default agent runner, delegating; a run started inside a guarded run is guarded by it."""

    def __init__(self, inner: AgentRunner) -> None:
        self._inner = inner

    async def run(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        run = ACTIVE_RUN.get()
        attached = _attached(kwargs)
        if run is None and attached is not None:  # the application's own Runner.run with a LoopGuard's hooks
            starting_agent, input = await attached.enter(starting_agent, input, kwargs)
            token = ACTIVE_RUN.set(attached.run)
            try:
                return await self._inner.run(starting_agent, input, **kwargs)
            finally:
                ACTIVE_RUN.reset(token)
        if run is not None:  # idempotent for the guarded run's own call
            starting_agent, kwargs = _nested(run, starting_agent, kwargs)
        return await self._inner.run(starting_agent, input, **kwargs)

    def run_streamed(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> RunResultStreaming:
        run = ACTIVE_RUN.get()
        attached = _attached(kwargs)
        if run is None and attached is not None:
            starting_agent = attached.enter_streamed(starting_agent, input, kwargs)
            token = ACTIVE_RUN.set(attached.run)  # the SDK starts its run task now: that task copies this context
            try:
                return self._inner.run_streamed(starting_agent, input, **kwargs)
            finally:
                ACTIVE_RUN.reset(token)
        if run is not None:
            starting_agent, kwargs = _nested(run, starting_agent, kwargs)
        return self._inner.run_streamed(starting_agent, input, **kwargs)

    def run_sync(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        if ACTIVE_RUN.get() is None and _attached(kwargs) is not None:  # Runner.run_sync with a LoopGuard's hooks
            from .run import run_sync  # the loop the sync entry points use (imported late: run imports this)

            return run_sync(lambda: self.run(starting_agent, input, **kwargs), name="Runner.run")
        return self._inner.run_sync(starting_agent, input, **kwargs)


def install_nested_guard() -> None:
    """Put the delegating runner in front of the SDK's default agent runner (once; idempotent)."""
    current = get_default_agent_runner()
    if not isinstance(current, _NestedRunGuard):
        set_default_agent_runner(_NestedRunGuard(current))
