"""Everything a guarded function-calling loop can be told, in one object (as the Agents SDK's ``RunConfig``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..budget import Budget, Policy
from ..core import Guard
from ..pricing import InputEstimator, Price
from ..pricing import estimate_input_tokens as _estimate_input_tokens
from ..retry import MODEL_RETRY, RetryPolicy
from ..run import OnRefusal, Release
from ..store.base import Store

__all__ = ["LoopOptions", "ToolChoice"]

ToolChoice = str | Mapping[str, Any] | None
"""``"auto"``, ``"required"``, ``"none"``, a forced function (either API's shape), or ``None`` (not sent)."""


@dataclass(frozen=True, kw_only=True)
class LoopOptions:
    """The options of a guarded loop. Pass one object (``options=LoopOptions(...)``, reusable across runs), or
    its fields as keyword arguments of the entry point, or both (the keywords win).

    >>> from agents_loopguard import Budget
    >>> base = LoopOptions(budget=Budget(model_turns=6, tool_executions=4), tool_choice="required")
    >>> LoopOptions.merge(base, {"task_id": "ticket-7"}).task_id
    'ticket-7'
    >>> LoopOptions.merge(None, {"max_turns": 3})
    Traceback (most recent call last):
    ...
    TypeError: unknown loop option 'max_turns' (the options are the fields of LoopOptions)
    """

    # --- the task ---
    budget: Budget | None = None
    """The task's limits (or pass ``guard=``). A task id already in the store keeps its own budget."""
    store: Store | None = None
    """Where the task's counters, ledger and outcome live."""
    task_id: str | None = None
    """The task to run (a second run of the same id continues its counters)."""
    policy: Policy | None = None
    """Thresholds of the progress rules."""
    guard: Guard | None = None
    """An existing guard instead of ``budget``/``store``/``task_id``/``policy``."""
    # --- the run ---
    tool_choice: ToolChoice = None
    """What the model is asked for while work remains; a forcing choice is released once none remains (R12)."""
    release_tool_choice: Release = "none"
    """What replaces a forcing ``tool_choice`` once no work remains: ``"none"`` (the model answers) or ``"auto"``."""
    reset_forced_function: bool = True
    """A forced function that ran is sent as ``"auto"`` afterwards. Narrower than the Agents SDK's
    ``reset_tool_choice``, which clears any choice (``"required"`` included) once a tool was used; here
    ``"required"`` stays until no work remains (then it is released to ``"none"``)."""
    on_refusal: OnRefusal = "end"
    """A refused call ends the run (``"end"``), is reported to the model (``"continue"``), or ends it and raises
    :class:`~agents_loopguard.run.GuardStopped` (``"raise"``)."""
    verify_output: Callable[[str | None], Any] | None = None
    """``verify_output(final_text) -> bool | evidence`` (sync, or async in the async loops): lets a final answer
    complete the task. Without it only a tool's ``verify`` saying ``done`` completes it."""
    final_answer: bool = True
    """After validated done, ask the model once more (tools released) for its final answer."""
    # --- requests ---
    max_output_tokens: int | None = None
    """Sent as the API's output bound; required with a cost budget (it bounds each request's worst case)."""
    request_options: Mapping[str, Any] | None = None
    """Passed to every request (``temperature``, ``parallel_tool_calls``...)."""
    model_retry: RetryPolicy = MODEL_RETRY
    """Retries of a failed model request, each attempt reserved (the loop owns them: the client's are off)."""
    # --- money ---
    prices: Mapping[str, Price] | None = None
    """Price table: with it every request reserves its worst-case cost first (required with ``Budget.cost``)."""
    estimate_input_tokens: InputEstimator = _estimate_input_tokens
    """Estimates a request's input tokens for the worst case (a generous estimate by default)."""

    @classmethod
    def merge(cls, options: LoopOptions | None, fields: Mapping[str, Any]) -> LoopOptions:
        """``options`` (or the defaults) with ``fields`` replaced; an unknown field is a TypeError."""
        known = {f.name for f in dataclasses.fields(cls)}
        for name in fields:
            if name not in known:
                raise TypeError(f"unknown loop option {name!r} (the options are the fields of LoopOptions)")
        return dataclasses.replace(options or cls(), **fields)
