"""Approval pauses of Agents SDK runs: persist the pause with the task's budget (resumed by :mod:`.resume`).

When a guarded run stops because a tool call needs approval, :func:`persist_pause` stores, in one transaction of the
task's store, the SDK's ``RunState`` (its JSON, which holds the conversation so far), the task's limits and counters,
the pending calls (call id, tool, canonical arguments, a write's operation id) and a digest over all of it. The entry
points (:func:`~agents_loopguard.sdk.run_guarded` and its twins) do this by default; the outcome is
``needs_human/approval`` with :attr:`~agents_loopguard.Outcome.pause_id`.

An operator decides (``loopguard --db URL approve PAUSE --who ana``, or :func:`agents_loopguard.ops.approvals.decide`),
and :func:`resume_guarded` continues the run, in a fresh process that has only the application's agent code. It
checks the digest, the decisions and the task before anything runs, claims the pause (one claimer wins: a pause
resumes at most once), records the ``resume`` transition (who, when, which decisions), applies the decisions to
exactly the pause's pending calls and continues under the *same* task: the counters go on from where the pause
left them, never from zero. A resumed run that pauses again stores a new pause of the same task.

Refusals are exceptions, raised before anything runs and before the pause is claimed:

=================================================  =====================================================
:class:`ResumeError`                               unknown pause, a pause of another task, a state this
                                                   agent cannot restore, interruptions that do not match
:class:`~agents_loopguard.ops.approvals.PauseTampered`  the stored pause does not match its digest
:class:`~agents_loopguard.ops.approvals.DecisionError`  decisions naming calls the pause does not hold, an
                                                   undecided call, decisions that contradict recorded ones
:class:`~agents_loopguard.PauseAlreadyResumed`      another process resumed (or is resuming) the pause
=================================================  =====================================================
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agents import FunctionTool
from agents.items import ToolApprovalItem
from agents.result import RunResult, RunResultBase, RunResultStreaming

from ..engine.core import Guard
from ..ops.approvals import ResumeError
from ..values.canonical import CanonicalError, canonical_json, redact
from .tools import tool_spec

__all__ = ["pending_calls", "persist_pause", "waiting_detail"]


# --- persisting a pause -----------------------------------------------------------------------------------


def _tool_of(item: ToolApprovalItem) -> FunctionTool | None:
    agent = getattr(item, "agent", None)
    for tool in getattr(agent, "tools", None) or ():
        if isinstance(tool, FunctionTool) and tool.name == item.name:
            return tool
    return None


def _pending_call(item: ToolApprovalItem, secrets: Iterable[str]) -> dict[str, Any]:
    """One interruption as the pause stores it: call_id, tool, kind, arguments (canonical JSON), operation_id."""
    raw = item.arguments
    try:
        args: Any = json.loads(raw) if raw and raw.strip() else {}
    except ValueError:
        args = None
    tool = _tool_of(item)
    spec = tool_spec(tool) if tool is not None else None
    kind = spec.kind if spec is not None else "read"
    named = spec.operation_of(args) if spec is not None and isinstance(args, dict) else None
    operation_id = named if isinstance(named, str) else None  # unnamed: refused as missing_operation_id if approved
    try:
        arguments = canonical_json(redact(args, secrets=secrets)).decode() if args is not None else None
    except CanonicalError:
        arguments = None
    return {
        "call_id": str(item.call_id),
        "tool": item.name,
        "kind": kind,
        "arguments": arguments if arguments is not None else redact(raw or "", secrets=secrets),
        "operation_id": operation_id,
    }


def pending_calls(result: RunResultBase, *, secrets: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The calls of an interrupted run that wait for a decision, as a pause stores them.

    Each is ``{"call_id", "tool", "kind", "arguments", "operation_id"}``: the arguments as canonical JSON text
    (RFC 8785, credentials redacted), and for a guarded write the business operation id its ``operation_id(args)``
    derives (the one the ledger will reserve once the call is approved).

    >>> import asyncio
    >>> from agents import Agent, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, function_call
    >>> from agents_loopguard import Budget
    >>> from agents_loopguard.sdk import guarded_tool, run_guarded
    >>> set_tracing_disabled(True)
    >>> @guarded_tool(kind="write", operation_id=lambda a: f"refund-{a['order']}", needs_approval=True,
    ...               verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"})
    ... def refund(order: int) -> str:
    ...     '''Refund an order.'''
    ...     return "refunded"
    >>> model = ScriptedModel([[function_call("refund", {"order": 42}, call_id="c1")]])
    >>> agent = Agent(name="clerk", model=model, tools=[refund])
    >>> outcome = asyncio.run(run_guarded(agent, "refund 42", budget=Budget(model_turns=3, tool_executions=3)))
    >>> pending_calls(outcome.result)
    [{'call_id': 'c1', 'tool': 'refund', 'kind': 'write', 'arguments': '{"order":42}', 'operation_id': 'refund-42'}]
    """
    items = [item for item in (getattr(result, "interruptions", None) or ()) if isinstance(item, ToolApprovalItem)]
    return [_pending_call(item, secrets) for item in items]


def waiting_detail(result: RunResultBase) -> str:
    waiting = list(getattr(result, "interruptions", None) or ())
    names = ", ".join(sorted({getattr(item, "name", None) or "tool" for item in waiting}))
    return f"{len(waiting)} call(s) wait for approval: {names}"


def persist_pause(
    result: RunResultBase,
    guard: Guard,
    *,
    context_serializer: Callable[[Any], Mapping[str, Any]] | None = None,
) -> str:
    """Store an approval interruption as a pause of the guard's task, in one transaction; return the pause id.

    Stored together (:meth:`agents_loopguard.Guard.pause`): the SDK's ``RunState`` JSON as text (it holds the
    conversation so far, the tool calls and their arguments: treat the store as holding the conversation), the
    task's limits and counters at that moment, the pending calls (see :func:`pending_calls`), their digest, the
    pause's status (``pending``), and the task's terminal outcome ``needs_human/approval`` with the pause id.

    The guarded entry points call it by default on every approval interruption; pass ``on_pause=`` to replace it
    (for a context object that is not a dict, ``functools.partial(persist_pause, context_serializer=...)``).

    >>> import asyncio
    >>> from agents import Agent, function_tool, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, function_call
    >>> from agents_loopguard import Budget, MemoryStore
    >>> from agents_loopguard.sdk import run_guarded
    >>> set_tracing_disabled(True)
    >>> @function_tool(needs_approval=True)
    ... def wipe(disk: str) -> str:
    ...     '''Wipe a disk.'''
    ...     return "wiped"
    >>> store = MemoryStore()
    >>> agent = Agent(name="ops", model=ScriptedModel([[function_call("wipe", {"disk": "d1"}, call_id="c1")]]),
    ...               tools=[wipe])
    >>> outcome = asyncio.run(run_guarded(agent, "wipe d1", budget=Budget(model_turns=4, tool_executions=2),
    ...                                   store=store, task_id="ops-1", on_pause=persist_pause))
    >>> outcome.status, outcome.reason, store.pause(outcome.pause_id).status
    (<Status.NEEDS_HUMAN: 'needs_human'>, <Reason.APPROVAL: 'approval'>, 'pending')
    """
    if not isinstance(result, (RunResult, RunResultStreaming)):
        raise TypeError(f"persist_pause needs the SDK's RunResult or RunResultStreaming, got {type(result).__name__}")
    calls = pending_calls(result, secrets=guard.secrets)
    try:
        state = json.dumps(result.to_state().to_json(context_serializer=context_serializer))
    except Exception as exc:
        raise ResumeError(
            f"task {guard.task_id!r}: the run state of the approval pause cannot be serialized "
            f"({type(exc).__name__}: {exc}); use a dict context or persist_pause(..., context_serializer=...)"
        ) from exc
    outcome = guard.pause(state, calls, detail=waiting_detail(result), result=result)
    assert outcome.pause_id is not None, "a stored pause has an id"
    return outcome.pause_id
