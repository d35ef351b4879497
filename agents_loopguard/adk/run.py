"""Run an ADK agent under the guard and return its :class:`~agents_loopguard.Outcome`: :func:`run_guarded` builds
the ``Runner`` with a :class:`~agents_loopguard.adk.LoopGuardPlugin`, runs one invocation and reads the outcome."""

from __future__ import annotations

from collections.abc import Mapping

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.genai import types
from typing_extensions import Unpack

from ..run import RunFieldsBase, RunOptions, ToolSpec
from ..values.outcome import Outcome
from .plugin import LoopGuardPlugin

__all__ = ["run_guarded"]


async def run_guarded(
    agent: BaseAgent,
    message: str | types.Content,
    *,
    session_id: str | None = None,
    user_id: str = "user",
    app_name: str = "loopguard",
    session_service: BaseSessionService | None = None,
    run_config: RunConfig | None = None,
    tools: Mapping[str, ToolSpec] | None = None,
    reset_forced_function: bool = True,
    options: RunOptions | None = None,
    **fields: Unpack[RunFieldsBase],
) -> Outcome:
    """Run ``agent`` on ``message`` in the session ``session_id`` (created when the service has none) under the
    task's guard and return the task's outcome. Without ``task_id`` the task is the session's id, so a second
    message to the same session continues the same counters (a confirmation's answer resumes it).

    An API error, ADK's ``max_llm_calls`` and every refusal end with the outcome; a programming error ends the
    task ``stopped/fatal`` and is re-raised; a cancellation ends it ``stopped/cancelled`` and propagates.

    >>> import asyncio
    >>> from google.adk.agents import LlmAgent
    >>> from agents_loopguard import Budget, MemoryStore
    >>> from agents_loopguard.adk.testing import ScriptedLlm, text
    >>> agent = LlmAgent(name="clerk", model=ScriptedLlm([text("Order 42 shipped.")]))
    >>> outcome = asyncio.run(run_guarded(agent, "Where is order 42?", budget=Budget(3, 2), store=MemoryStore()))
    >>> outcome.status, outcome.used.models
    (<Status.PARTIAL: 'partial'>, 1)
    """
    plugin = LoopGuardPlugin(options, tools=tools, reset_forced_function=reset_forced_function, **fields)
    service = session_service if session_service is not None else InMemorySessionService()
    runner = Runner(app=App(name=app_name, root_agent=agent, plugins=[plugin]), session_service=service)
    session = None
    if session_id is not None:
        session = await service.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
    if session is None:
        session = await service.create_session(app_name=app_name, user_id=user_id, session_id=session_id)
    content = (
        message if isinstance(message, types.Content) else types.Content(role="user", parts=[types.Part(text=message)])
    )
    before = plugin.outcome(session.id)
    try:
        async for _event in runner.run_async(
            user_id=user_id, session_id=session.id, new_message=content, run_config=run_config
        ):
            pass
    except Exception as exc:
        if plugin.raised(session.id) is not None or plugin.outcome(session.id) is before:
            raise plugin.unwrapped(exc) from None  # the plugin's own (a refused start, GuardStopped) as raised
    except BaseException as exc:  # a cancellation or an interrupt: ADK runs no callback
        plugin.cancelled(session.id, f"{type(exc).__name__} during the run")
        raise
    outcome = plugin.outcome(session.id)
    assert outcome is not None, "every invocation the plugin guarded ends with an outcome"
    return outcome
