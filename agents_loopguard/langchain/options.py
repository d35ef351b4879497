"""Everything the LangChain middleware can be told: :class:`LangChainOptions`, the run's
:class:`~agents_loopguard.RunOptions` plus the tools' declarations and the ``tool_choice``.

>>> from agents_loopguard import Budget
>>> from agents_loopguard.run import declare_tool
>>> options = LangChainOptions(budget=Budget(model_turns=6, tool_executions=4), tool_choice="required",
...                            tools={"lookup": declare_tool("lookup")})
>>> options.tools["lookup"].kind, options.model_retry is None
('read', True)
>>> LangChainOptions(budget=Budget(6, 4), on_refusal="error").on_refusal
'raise'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..run.declarations import ToolSpec
from ..run.options import RunFields, RunOptions
from ..run.retry import RetryPolicy

__all__ = ["LangChainFields", "LangChainOptions"]


@dataclass(frozen=True, kw_only=True)
class LangChainOptions(RunOptions):
    """The options of :class:`~agents_loopguard.langchain.LoopGuardMiddleware`: every field of
    :class:`~agents_loopguard.RunOptions` and the middleware's own. ``on_refusal`` takes LangChain's
    ``exit_behavior`` names: ``"end"``, ``"continue"``, and ``"error"`` for ``"raise"``. Without ``task_id`` the
    task is the LangGraph thread (``config["configurable"]["thread_id"]``; ``configurable["task_id"]`` names
    another one), and a run without a thread is a task of its own."""

    conversation: bool = True
    """A new message on a thread whose last run ended with an answer reopens its task (a recorded ``message``
    transition, the counters going on: the budget bounds the whole thread). ``False``: the task answers every
    later message with its outcome."""

    tools: Mapping[str, ToolSpec] = field(default_factory=dict)
    """The guard's declaration of each tool, by tool name (:func:`~agents_loopguard.run.declare_tool`: a write's
    ``operation_id``, ``verify``, retries, ``max_executions``). An undeclared tool is guarded as a read without
    verification (its calls count, identical calls are cut, nothing it returns is progress)."""
    tool_choice: Any = None
    """What the model is asked for while work remains (``"required"``, ``"auto"``, a tool's name); a forcing
    choice is released once no work remains (R12). A ``tool_choice`` another middleware set on the request wins."""
    reset_forced_function: bool = True
    """A forced function that ran is sent as ``"auto"`` afterwards (``create_agent`` would force it again on every
    request); ``"required"`` stays until no work remains, then it is released."""
    model_retry: RetryPolicy | None = None
    """Retries of a failed model request, each attempt reserved. ``None``: as many as the chat model's client would
    have made (``ChatOpenAI(max_retries=...)``, the openai client's 2 by default), taken over (its client is told
    not to retry)."""

    def __post_init__(self) -> None:
        if self.on_refusal == "error":  # type: ignore[comparison-overlap]
            object.__setattr__(self, "on_refusal", "raise")  # LangChain's exit_behavior name for the same


class LangChainFields(RunFields, total=False):
    """The fields of :class:`LangChainOptions` as keyword arguments of the middleware."""

    conversation: bool
    tool_choice: Any
    reset_forced_function: bool
    model_retry: RetryPolicy | None
