"""Everything a guarded function-calling loop can be told, in one object: :class:`LoopOptions`, the run's
:class:`~agents_loopguard.RunOptions` plus what the loop sends with each request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..run.options import RunFieldsBase, RunOptions
from ..run.retry import MODEL_RETRY, RetryPolicy

__all__ = ["LoopFields", "LoopOptions", "ToolChoice"]

ToolChoice = str | Mapping[str, Any] | None
"""``"auto"``, ``"required"``, ``"none"``, a forced function (either API's shape), or ``None`` (not sent)."""


@dataclass(frozen=True, kw_only=True)
class LoopOptions(RunOptions):
    """The options of a guarded loop: every field of :class:`~agents_loopguard.RunOptions` (the task, the refusal
    mode, ``verify_output``, prices...) and the loop's own. Pass one object (``options=LoopOptions(...)``, or a
    plain ``RunOptions``; reusable across runs), or its fields as keyword arguments of the entry point, or both
    (the keywords win). ``verify_output`` receives the final text (sync, or async in the async loops).

    >>> from agents_loopguard import Budget
    >>> base = LoopOptions(budget=Budget(model_turns=6, tool_executions=4), tool_choice="required")
    >>> LoopOptions.merge(base, {"task_id": "ticket-7"}).task_id
    'ticket-7'
    >>> LoopOptions.merge(None, {"max_turns": 3})
    Traceback (most recent call last):
    ...
    TypeError: unknown option 'max_turns' (the options are the fields of LoopOptions)
    """

    tool_choice: ToolChoice = None
    """What the model is asked for while work remains; a forcing choice is released once none remains (R12)."""
    reset_forced_function: bool = True
    """A forced function that ran is sent as ``"auto"`` afterwards. Narrower than the Agents SDK's
    ``reset_tool_choice``, which clears any choice (``"required"`` included) once a tool was used; here
    ``"required"`` stays until no work remains (then it is released to ``"none"``)."""
    final_answer: bool = True
    """After validated done, ask the model once more (tools released) for its final answer."""
    max_output_tokens: int | None = None
    """Sent as the API's output bound; required with a cost budget (it bounds each request's worst case)."""
    request_options: Mapping[str, Any] | None = None
    """Passed to every request (``temperature``, ``parallel_tool_calls``...)."""
    model_retry: RetryPolicy = MODEL_RETRY
    """Retries of a failed model request, each attempt reserved (the loop owns them: the client's are off)."""


class LoopFields(RunFieldsBase, total=False):
    """The fields of :class:`LoopOptions` as keyword arguments of an entry point (its own ``tools=`` takes the
    tools themselves; declarations by name come with ``options=RunOptions(tools=...)``)."""

    tool_choice: ToolChoice
    reset_forced_function: bool
    final_answer: bool
    max_output_tokens: int | None
    request_options: Mapping[str, Any] | None
    model_retry: RetryPolicy
