"""Every use of a private name of the Agents SDK, each behind a public fallback.

openai-agents 0.22, 0.23 and 0.24 have all four names; a later release may rename any of them, so the adapter reads
them only here, and a name that is gone switches to its fallback instead of breaking the import or the run:

* ``agents.models._retry_runtime`` (``provider_managed_retries_disabled``, ``should_disable_provider_managed_retries``):
  the SDK's switch that tells the openai client not to retry inside one model call, so that the guard makes (and
  reserves) each retry itself (R2). Fallback: the client keeps its own retries, beneath the ``Model`` interface
  where nobody counts them, and the guard makes none (a retry is never doubled); a warning says so once.
* the ``_client`` of the SDK's OpenAI models: that client's ``max_retries`` and ``timeout``. Fallback: the openai
  defaults (``openai.DEFAULT_MAX_RETRIES`` retries; each request's timeout is the time left before the deadline).
* ``RunState._context``: the approvals recorded in a state, and the context carried over when a state is restored
  against the guarded agents. Fallback: the state's own JSON (``RunState.to_json``): approvals, usage and a mapping
  context survive; a context of another type is the ``context=`` the resumed run is given (the SDK's override).
* ``FunctionTool._agent_instance`` (the agent behind ``agent.as_tool()``): which agents a run can reach, whose cost
  and token limits are checked before anything runs. Fallback: such an agent is checked at each request instead; a
  refused request is never sent, and the agent tool's failure policy (the SDK's) tells the calling model a tool
  error rather than the run being refused before it starts.

>>> from agents import Agent
>>> tool = Agent(name="inner").as_tool(tool_name="ask", tool_description="Ask.")
>>> agent_of_tool(tool).name, RETRY_SWITCH.found
('inner', True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import openai
from agents.models.interface import Model
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.models.openai_responses import OpenAIResponsesModel

__all__ = [
    "RETRY_SWITCH",
    "RetrySwitch",
    "agent_of_tool",
    "client_retries",
    "client_timeout",
    "load_retry_switch",
    "state_context",
    "tool_decisions",
]

log = logging.getLogger(__name__)

RETRY_MODULE = "agents.models._retry_runtime"
CLIENT_ATTRIBUTE = "_client"
CONTEXT_ATTRIBUTE = "_context"
AGENT_ATTRIBUTE = "_agent_instance"
_MISSING: Any = object()


@dataclasses.dataclass(frozen=True)
class RetrySwitch:
    """The SDK's switch for the openai client's own retries, or its fallback (``found`` is False: the switch does
    nothing, the client retries as configured, and the guard makes no retry of its own)."""

    found: bool
    disabled: Callable[[bool], contextlib.AbstractContextManager[None]]
    already_off: Callable[[], bool]


@contextlib.contextmanager
def _no_switch(_disabled: bool) -> Iterator[None]:
    yield


def load_retry_switch() -> RetrySwitch:
    """The SDK's retry switch when its private module still has it, else the fallback (with a warning).

    >>> load_retry_switch().found
    True
    """
    try:
        module = importlib.import_module(RETRY_MODULE)
        disabled, already_off = module.provider_managed_retries_disabled, module.should_disable_provider_managed_retries
        return RetrySwitch(True, disabled, already_off)
    except (ImportError, AttributeError):
        log.warning(
            "this openai-agents has no %s switch: the openai client's own retries are not reserved by the guard "
            "(give the client max_retries=0 and ModelSettings(retry=...) to have every attempt counted)",
            RETRY_MODULE,
        )
        return RetrySwitch(False, _no_switch, lambda: False)


RETRY_SWITCH = load_retry_switch()


def _client_of(model: Model) -> Any:
    """The openai client of one of the SDK's OpenAI models (``None``: created lazily, a default ``AsyncOpenAI()``;
    ``_MISSING``: not an SDK OpenAI model, or the SDK renamed the attribute)."""
    if not isinstance(model, (OpenAIResponsesModel, OpenAIChatCompletionsModel)):
        return getattr(model, CLIENT_ATTRIBUTE, _MISSING)
    return getattr(model, CLIENT_ATTRIBUTE, None)


def client_retries(model: Model) -> int:
    """The retries the model's openai client would make inside one call: 0 for a model without an openai client.

    >>> from agents.testing import ScriptedModel
    >>> client_retries(ScriptedModel([])), client_retries(OpenAIResponsesModel("m", openai.AsyncOpenAI(api_key="k")))
    (0, 2)
    """
    client = _client_of(model)
    if client is _MISSING:
        return 0
    retries = getattr(client, "max_retries", 0) if client is not None else openai.DEFAULT_MAX_RETRIES
    return retries if isinstance(retries, int) and retries > 0 else 0


def client_timeout(model: Model) -> Any:
    """The timeout of the model's openai client, ``None`` when it cannot be read."""
    client = _client_of(model)
    return None if client is _MISSING else getattr(client, "timeout", None)


def state_context(state: Any) -> Any:
    """The ``RunContextWrapper`` a ``RunState`` carries, ``None`` when the SDK no longer exposes it there."""
    return getattr(state, CONTEXT_ATTRIBUTE, None)


def _serialized_decisions(context: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """(tool name, decision record) of a state's JSON ``context``: ``approvals`` by tool name (0.22 keeps every
    decision there) and ``function_tool_approvals`` (0.23 and later keep an agent's function tools' there)."""
    by_name = [(name, record) for name, record in (context.get("approvals") or {}).items()]
    owned = [(entry.get("tool_key"), entry.get("decision")) for entry in context.get("function_tool_approvals") or ()]
    return [(name, record) for name, record in [*by_name, *owned] if isinstance(record, Mapping)]


def _decided(records: list[tuple[Any, Any]], tool: str | None, call_id: str) -> bool | None:
    """``RunContextWrapper.is_tool_approved`` read from a state's JSON decision records."""
    for name, record in records:
        if name != tool:
            continue
        approved, rejected = record.get("approved"), record.get("rejected")
        if approved is True or (isinstance(approved, list) and call_id in approved):
            return True
        if rejected is True or (isinstance(rejected, list) and call_id in rejected):
            return False
    return None


def tool_decisions(state: Any) -> Callable[[str | None, str], bool | None]:
    """``(tool name, call id) -> approved?`` for the decisions recorded in ``state`` (``None``: none recorded)."""
    context = state_context(state)
    if context is not None:
        return lambda tool, call_id: context.is_tool_approved(tool, call_id)
    records = _serialized_decisions(state.to_json(context_serializer=lambda _context: {}).get("context") or {})
    return lambda tool, call_id: _decided(records, tool, call_id)


def nested_owner(state: Any, item: Any) -> tuple[Any, Any] | None:
    """``(nested state, its item)`` when ``item`` is an interruption of an agent used as a tool (the nested run
    keeps its own state), else ``None``. Private SDK API (0.24): ``RunState._find_nested_approval_state``."""
    find = getattr(state, "_find_nested_approval_state", None)
    owner = find(item) if callable(find) else None
    return owner if isinstance(owner, tuple) else None


def nested_decision(state: Any, item: Any) -> bool | None:
    """The decision recorded for ``item``, an interruption of an agent used as a tool (``state.approve(item)``
    records it in that nested run's own state), or ``None``."""
    owner = nested_owner(state, item)
    if owner is None:
        return None
    nested_state, nested_item = owner
    return tool_decisions(nested_state)(nested_item.name, str(nested_item.call_id))


def set_agent_of_tool(tool: Any, agent: Any) -> None:
    """Name ``agent`` as the agent behind an ``agent.as_tool()`` tool (a copy's: never an application's tool)."""
    if hasattr(tool, AGENT_ATTRIBUTE):
        setattr(tool, AGENT_ATTRIBUTE, agent)


def agent_of_tool(tool: Any) -> Any:
    """The agent behind an ``agent.as_tool()`` tool, ``None`` for any other tool (or when the SDK renamed it)."""
    return getattr(tool, AGENT_ATTRIBUTE, None)
