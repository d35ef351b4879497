"""What the LangChain hooks of one invocation share: its guarded run (:class:`Scope`), the agent state's entry for
the guard, and the messages the guard adds (a refusal the model reads, the answer of a run the guard ended).

>>> ended_text("stopped", "same_call", "search: the same call ran 2 times without progress")
'Stopped by loopguard (stopped/same_call): search: the same call ran 2 times without progress'
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain.agents.middleware import AgentState
from langchain.agents.middleware.types import OmitFromInput
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.config import get_config
from typing_extensions import NotRequired

from ..run import NO_OUTPUT, GuardedRun
from ..run.retry import RetryPolicy
from ..values.outcome import Outcome

__all__ = [
    "ENDED",
    "PARENT",
    "STATE_KEY",
    "LoopGuardState",
    "Scope",
    "configurable",
    "ended_message",
    "ended_text",
    "final_output",
    "refusal",
]

STATE_KEY = "loopguard"
ENDED = "loopguard_ended"
"""``AIMessage.response_metadata`` key of the message that stands for a model request the guard refused."""


class LoopGuardState(AgentState[Any]):
    """The agent state with the guard's entry: ``{"task_id": ..., "outcome": RecoveryRecord dict or None}``."""

    loopguard: NotRequired[Annotated[dict[str, Any], OmitFromInput]]


@dataclass
class Scope:
    """One invocation's guarded run and what the hooks tell each other."""

    run: GuardedRun
    task_id: str
    models: dict[int, tuple[Any, str | None, int | None, RetryPolicy]] = field(default_factory=dict)
    """id(chat model) -> (the model, its name, its output bound, its retries), checked once per run."""
    error: BaseException | None = None
    """The model error that ended the run (its verdict recorded by the run), for the conclusion."""
    invalid: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Calls whose arguments were not JSON (LangChain's ``invalid_tool_calls``), by call id: (tool, why); refused
    in their turn among the response's calls."""
    stopped_by: Any = None
    """The framework's own stop (``model_behavior``: the chat model could not read the model's answer)."""
    turns: threading.Condition = field(default_factory=threading.Condition)
    """LangGraph runs the calls of one response on threads in a sync run: the run takes them one at a time, in the
    response's order (``served``: the call ids it took)."""
    served: set[str] = field(default_factory=set)
    outcome: Outcome | None = None
    key: str = ""
    """How the invocation's hooks find this scope (the agent state carries it): the task id, or for a nested
    agent's run, a key of its own."""
    nested: bool = False
    """The run of an agent invoked inside a guarded tool body: it shares the parent's run (its task, budget, stop
    mark and ledger) and never concludes the task."""


PARENT: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("loopguard_langchain_parent", default=None)
"""The scope whose tool body is running: an agent invoked inside it (a subagent as a tool) joins that run."""


def configurable() -> dict[str, Any]:
    """The running graph's ``config["configurable"]`` (empty outside a graph)."""
    try:
        return dict(get_config().get("configurable") or {})
    except RuntimeError:  # outside a graph
        return {}


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)


def final_output(state: Mapping[str, Any]) -> Any:
    """The model's final answer in an agent state: its last message, when the model wrote it (not the guard), or
    the structured response it ended with (``response_format=ToolStrategy(...)``: the last message is the tool's).

    >>> final_output({"messages": [AIMessage("It is paid.")]})
    'It is paid.'
    """
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    if isinstance(last, AIMessage) and not last.tool_calls and not last.response_metadata.get(ENDED):
        return _text(last)
    structured = state.get("structured_response")
    if isinstance(last, ToolMessage) and structured is not None:
        dump = getattr(structured, "model_dump", None)
        return dump(mode="json") if callable(dump) else structured
    return NO_OUTPUT


def ended_text(status: str, reason: str, detail: str | None) -> str:
    """What a run the guard ended says, as its last message."""
    return f"Stopped by loopguard ({status}/{reason})" + (f": {detail}" if detail else "")


def ended_message(scope: Scope) -> AIMessage:
    """The answer that stands for a model request the guard refused: it says why; the agent ends on it."""
    verdict = scope.run.verdict
    outcome = scope.outcome or scope.run.guard.outcome
    if verdict is not None:
        status, reason, detail = str(verdict.status), str(verdict.reason), verdict.detail
    elif outcome is not None:
        status, reason, detail = str(outcome.status), str(outcome.reason), outcome.detail
    else:
        status, reason, detail = "stopped", "model_error", f"{type(scope.error).__name__}: {scope.error}"
    why = f"{status}/{reason}"
    return AIMessage(content=ended_text(status, reason, detail), name="loopguard", response_metadata={ENDED: why})


def refusal(call: Mapping[str, Any], message: str) -> ToolMessage:
    """The ``ToolMessage`` the model reads instead of a refused call's output."""
    return ToolMessage(content=message, name=call.get("name"), tool_call_id=call.get("id") or "", status="error")
