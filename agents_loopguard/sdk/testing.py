"""Call guarded tools in an application's unit tests, without a model.

:func:`call_tool` (async) and :func:`call_tool_sync` make one call of an Agents SDK tool the way a guarded run makes
it: the SDK's own invocation (``agents.tool.invoke_function_tool``: the JSON arguments checked against the tool's
schema, its timeout, its failure policy) inside a real guarded run, so the guard authorizes the call, runs the
body, verifies and settles it in a real store. What comes back is what the model would read, the guard's decision,
and the task's guard, to assert on counters and on the ledger.

>>> from agents_loopguard import MemoryStore
>>> from agents_loopguard.sdk import guarded_tool
>>> sent = []
>>> @guarded_tool(kind="write", operation_id=lambda a: f"refund-{a['order']}",
...               verify=lambda a, out: {"revision": 1, "done": False, "effect": "committed"})
... def refund(order: int) -> str:
...     '''Refund an order.'''
...     sent.append(order)
...     return f"refunded {order}"
>>> store = MemoryStore()
>>> first = call_tool_sync(refund, {"order": 42}, store=store)
>>> again = call_tool_sync(refund, {"order": 42}, store=store)  # another task, the same business operation
>>> first.output, again.output, sent, store.operations()[0].state
('refunded 42', 'refunded 42', [42], <OperationState.COMMITTED: 'committed'>)

What a call does not do: ask a model (no model turn is used), ask for approval (``needs_approval``: the call is
made as if approved), run tool guardrails or run hooks. Those belong to the runner: test them with
``agents.testing.ScriptedModel`` and :func:`~agents_loopguard.sdk.run_guarded`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool
from agents.tool import invoke_function_tool
from agents.tool_context import ToolContext

from ..engine.core import Guard, Verdict
from ..run import Ending, GuardedRun, OnRefusal, RunOptions, conclude_now, drive, perform_check
from ..run.conclusion import decide
from ..store.base import Store
from ..store.memory import MemoryStore
from ..values.budget import Budget, Policy
from ..values.outcome import Outcome
from ._internal import ACTIVE_RUN, trace_decision
from .attach import GuardStopped, LoopGuard
from .graph import install_nested_guard
from .run import run_sync
from .tools import guard_undeclared

__all__ = ["DEFAULT_BUDGET", "ToolCallResult", "call_tool", "call_tool_sync"]

DEFAULT_BUDGET = Budget(model_turns=10, tool_executions=10)
"""The budget of a task :func:`call_tool` starts without ``budget=`` (a task that exists keeps its own)."""


@dataclass(frozen=True)
class ToolCallResult:
    """One tool call made by :func:`call_tool`."""

    output: Any
    """What the model would read: the tool's output (a committed write: its stored output, the body not run), the
    refusal, or the text of the tool's ``failure_error_function``. ``None`` when the call raised (see ``error``)."""
    verdict: Verdict | None
    """The guard's decision about the call: a refusal, a failure or a stop; ``completed/validated_done`` when its
    evidence said the task is done; ``None`` when the call ran and the run would go on."""
    outcome: Outcome | None
    """The task's outcome (stored, sticky) when the call ended the run, as ``run_guarded`` would have ended it;
    ``None`` while the task goes on (the next call of the same task continues its counters)."""
    guard: Guard
    """The task's guard: ``guard.used`` (the counters), ``guard.store`` (the ledger), ``guard.task_id``. Pass it
    back as ``guard=`` to make the next call in the same task."""
    error: Exception | None = None
    """The exception the call raised (``failure_error_function=None``, a ``raise_exception`` timeout); the run
    ended with the failure the guard recorded (``outcome``)."""


async def call_tool(
    tool: FunctionTool,
    args: Mapping[str, Any] | str | None = None,
    *,
    budget: Budget | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    policy: Policy | None = None,
    guard: Guard | None = None,
    context: Any = None,
    on_refusal: OnRefusal = "end",
) -> ToolCallResult:
    """Call ``tool`` with ``args`` (a mapping, or the model's raw JSON text) through the guarded path, no model.

    Args:
        budget, store, task_id, policy: the task the call belongs to (or pass ``guard=``). Defaults: a new task in
            a fresh :class:`~agents_loopguard.MemoryStore` with :data:`DEFAULT_BUDGET`. Pass the same ``store``
            to share the ledger between calls, and the same ``task_id`` (or the returned ``guard``) to continue a
            task's counters and its progress rules.
        context: the run context the tool's ``RunContextWrapper`` / ``ToolContext`` parameter sees.
        on_refusal: as for :func:`~agents_loopguard.sdk.run_guarded`.

    A plain ``FunctionTool`` is guarded as a guarded run guards it (an undeclared read). A programming error (the
    tool raises something the guard did not record) ends the task as ``stopped/fatal`` and is re-raised.

    >>> import asyncio
    >>> from agents_loopguard import Budget
    >>> from agents_loopguard.sdk import guarded_tool
    >>> @guarded_tool
    ... async def search(q: str) -> str:
    ...     '''Search.'''
    ...     return f"hits for {q}"
    >>> done = asyncio.run(call_tool(search, {"q": "refund policy"}))
    >>> done.output, done.verdict, done.guard.used.tools
    ('hits for refund policy', None, 1)
    >>> broke = asyncio.run(call_tool(search, {"q": "x"}, budget=Budget(model_turns=1, tool_executions=0)))
    >>> broke.outcome.reason, broke.output.startswith("refused: stopped/tool_budget"), broke.guard.used.tools
    (<Reason.TOOL_BUDGET: 'tool_budget'>, True, 0)
    """
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"call_tool needs a FunctionTool (a guarded tool, or a plain one), got {type(tool).__name__}")
    if guard is None:
        budget = budget if budget is not None else DEFAULT_BUDGET
        store = store if store is not None else MemoryStore()
    options = RunOptions(guard=guard, budget=budget, store=store, task_id=task_id, policy=policy, on_refusal=on_refusal)
    install_nested_guard()
    run = GuardedRun.start(options, observer=trace_decision, raises=GuardStopped)
    arguments = args if isinstance(args, str) else json.dumps(dict(args or {}))
    ctx = ToolContext(
        context, tool_name=tool.name, tool_call_id=f"call_{uuid.uuid4().hex[:12]}", tool_arguments=arguments
    )
    token = ACTIVE_RUN.set(run)
    try:
        output = await invoke_function_tool(function_tool=guard_undeclared(tool), context=ctx, arguments=arguments)
    except Exception as error:
        return _raised(run, error)
    finally:
        ACTIVE_RUN.reset(token)
    run.drain_interrupted()  # a body the tool's timeout abandoned: a timed-out call, as the run would see it
    if run.verdict is not None:
        return ToolCallResult(output, run.verdict, conclude_now(run, Ending()), run.guard)
    verdict = run.told[-1] if run.told else run.done
    return ToolCallResult(output, verdict, None, run.guard)


def _raised(run: GuardedRun, error: Exception) -> ToolCallResult:
    """The call raised: a failure the guard recorded ends the run with it (as in ``run_guarded``); anything else is
    a programming error: the task ends ``stopped/fatal`` and the error is re-raised."""
    ending = LoopGuard.ending_of(error)
    verdict, raised = drive(decide(run, ending), perform_check)
    if raised is not None:
        conclude_now(run, ending)  # ends the task stopped/fatal, then re-raises
    verdict = run.stop(verdict)
    return ToolCallResult(None, verdict, conclude_now(run, Ending()), run.guard, error)


def call_tool_sync(
    tool: FunctionTool,
    args: Mapping[str, Any] | str | None = None,
    *,
    budget: Budget | None = None,
    store: Store | None = None,
    task_id: str | None = None,
    policy: Policy | None = None,
    guard: Guard | None = None,
    context: Any = None,
    on_refusal: OnRefusal = "end",
) -> ToolCallResult:
    """:func:`call_tool` for synchronous tests (same arguments). Not callable while an event loop is running.

    >>> from agents_loopguard.sdk import guarded_tool
    >>> @guarded_tool
    ... def lookup(city: str) -> str:
    ...     '''Look a city up.'''
    ...     return f"found {city}"
    >>> first = call_tool_sync(lookup, {"city": "Oslo"})
    >>> second = call_tool_sync(lookup, {"city": "Oslo"}, guard=first.guard)
    >>> third = call_tool_sync(lookup, {"city": "Oslo"}, guard=first.guard)  # the same call a third time
    >>> second.output, third.outcome.reason, first.guard.used.tools
    ('found Oslo', <Reason.SAME_CALL: 'same_call'>, 2)
    """
    return run_sync(
        lambda: call_tool(
            tool,
            args,
            budget=budget,
            store=store,
            task_id=task_id,
            policy=policy,
            guard=guard,
            context=context,
            on_refusal=on_refusal,
        ),
        name="call_tool",
    )
