"""Approval pauses of Agents SDK runs: persist the pause with the task's budget, resume it once, in any process.

When a guarded run stops because a tool call needs approval, :func:`persist_pause` stores, in one transaction of the
task's store, the SDK's ``RunState`` (its JSON, which holds the conversation so far), the task's limits and counters,
the pending calls (call id, tool, canonical arguments, a write's operation id) and a digest over all of it. The entry
points (:func:`~agents_loopguard.sdk.run_guarded` and its twins) do this by default; the outcome is
``needs_human/approval`` with :attr:`~agents_loopguard.Outcome.pause_id`.

An operator decides (``loopguard --db URL approve PAUSE --who ana``, or :func:`agents_loopguard.approvals.decide`),
and :func:`resume_guarded` continues the run, in a fresh process that has only the application's agent code. It
checks the digest, the decisions and the task before anything runs, claims the pause (one claimer wins: a pause
resumes at most once), records the ``resume`` transition (who, when, which decisions), applies the decisions to
exactly the pause's pending calls and continues under the *same* task: the counters go on from where the pause
left them, never from zero. A resumed run that pauses again stores a new pause of the same task.

Refusals are exceptions, raised before anything runs and before the pause is claimed:

=================================================  =====================================================
:class:`ResumeError`                               unknown pause, a pause of another task, a state this
                                                   agent cannot restore, interruptions that do not match
:class:`~agents_loopguard.approvals.PauseTampered`  the stored pause does not match its digest
:class:`~agents_loopguard.approvals.DecisionError`  decisions naming calls the pause does not hold, an
                                                   undecided call, decisions that contradict recorded ones
:class:`~agents_loopguard.PauseAlreadyResumed`      another process resumed (or is resuming) the pause
=================================================  =====================================================
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agents import Agent, FunctionTool, RunState
from agents.items import ToolApprovalItem
from agents.result import RunResult, RunResultBase, RunResultStreaming

from ..approvals import APPROVE, DecisionError, PauseTampered, check_decisions, check_pause, pause_digest
from ..budget import Policy
from ..canonical import CanonicalError, canonical_json, redact
from ..core import Guard
from ..errors import InputError, NotFoundError
from ..outcome import Outcome, Reason, Status
from ..store.base import PauseAlreadyResumed, PauseRecord, Store
from .run import run_guarded, run_sync
from .tools import tool_spec

__all__ = ["ResumeError", "pending_calls", "persist_pause", "resume_guarded", "resume_guarded_sync"]


class ResumeError(InputError):
    """A pause that cannot be resumed as asked (the message says why and what to do); nothing was run."""


class UnknownPause(ResumeError, NotFoundError):
    """No pause with that id in the store given; nothing was run."""


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
    operation_id: str | None = None
    if spec is not None and spec.kind == "write" and spec.operation_id is not None and isinstance(args, dict):
        try:
            derived = spec.operation_id(args)
        except Exception:  # the guard refuses such a write as missing_operation_id when it is approved
            derived = None
        operation_id = derived if isinstance(derived, str) and derived else None
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


def _waiting_detail(result: RunResultBase) -> str:
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

    Stored together (``Store.save_pause``): the SDK's ``RunState`` JSON as text (it holds the conversation so far,
    the tool calls and their arguments: treat the store as holding the conversation), the task's limits and
    counters at that moment, the pending calls (see :func:`pending_calls`), their digest, the pause's status
    (``pending``), and the task's terminal outcome ``needs_human/approval`` carrying the pause id.

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
    pause_id = f"pause-{uuid.uuid4().hex[:16]}"
    snapshot = guard.store.task(guard.task_id)
    used = snapshot.used if snapshot is not None else guard.used
    revision = max(guard.revision, snapshot.revision if snapshot is not None else 0)
    outcome = Outcome(
        Status.NEEDS_HUMAN,
        Reason.APPROVAL,
        task_id=guard.task_id,
        revision=revision,
        used=used,
        detail=redact(_waiting_detail(result), secrets=guard.secrets),
        pause_id=pause_id,
    )
    guard.store.save_pause(
        guard.task_id,
        pause_id,
        state,
        calls,
        digest=pause_digest(guard.task_id, state, calls),
        outcome=outcome.record().to_dict(),
        now=guard._now(),
    )
    return pause_id


# --- resuming a pause -------------------------------------------------------------------------------------


def _load(store: Store, pause_id: str, task_id: str | None) -> PauseRecord:
    record = store.pause(pause_id)
    if record is None:
        raise UnknownPause(f"unknown pause {pause_id!r} in this store: check the id (`loopguard show TASK` lists them)")
    if task_id is not None and record.task_id != task_id:
        raise ResumeError(
            f"pause {pause_id!r} belongs to task {record.task_id!r}, not {task_id!r}: a decision only touches "
            "its own task's pause; nothing was run"
        )
    check_pause(record)
    if record.status == "resumed":
        raise PauseAlreadyResumed(
            f"pause {pause_id!r} was already resumed by {record.resumed_by!r}: a pause resumes at most once "
            f"(the task continues in that run; `loopguard show {record.task_id}` shows it)"
        )
    return record


def _decisions_for(record: PauseRecord, decisions: Mapping[str, str] | None) -> dict[str, str]:
    if decisions is None:
        if record.status != "decided":
            raise DecisionError(
                f"pause {record.pause_id!r} has no recorded decisions: an operator approves it with "
                f"`loopguard approve {record.pause_id} --who NAME` (or approvals.decide), or pass decisions=; "
                "nothing was run"
            )
        return check_decisions(record, record.decisions)
    checked = check_decisions(record, decisions)
    if record.status == "decided" and record.decisions != checked:
        raise DecisionError(
            f"pause {record.pause_id!r} was already decided by {record.decided_by!r} ({record.decisions}); "
            f"decisions={checked} contradict them: resume with decisions=None to apply the recorded ones"
        )
    return checked


async def _restore(
    agent: Agent[Any], record: PauseRecord, *, context_deserializer: Any, context_override: Any
) -> RunState[Any]:
    try:
        state: RunState[Any] = await RunState.from_string(
            agent, record.state, context_deserializer=context_deserializer, context_override=context_override
        )
    except Exception as exc:
        raise ResumeError(
            f"pause {record.pause_id!r}: its run state cannot be restored against agent {agent.name!r} "
            f"({type(exc).__name__}: {exc}); resume with the agent graph that paused (agents match by name); "
            "nothing was run"
        ) from exc
    waiting = sorted(str(item.call_id) for item in state.get_interruptions())
    stored = sorted(str(call.get("call_id")) for call in record.pending_calls)
    if waiting != stored:
        raise ResumeError(
            f"pause {record.pause_id!r}: the run state waits for calls {waiting}, the pause for {stored}; "
            "nothing was run"
        )
    return state


def _claim(store: Store, record: PauseRecord, decisions: dict[str, str], *, who: str, why: str, given: bool) -> Any:
    """Record the decisions (if the caller brought them) and claim the pause: the database serializes both, so
    the decisions applied are always the ones stored, and one claimer wins."""
    at = time.time()
    if given and record.status == "pending":
        try:
            store.decide_pause(record.pause_id, who=who, decisions=decisions, why=why, now=at)
        except PauseAlreadyResumed:  # someone decided or resumed it since we read it
            current = store.pause(record.pause_id)
            if current is None or current.status == "resumed":
                raise
            _decisions_for(current, decisions)  # decided meanwhile: only the very same decisions may go on
    return store.claim_pause(record.pause_id, who=who, decisions=None, why=why, now=at)


async def resume_guarded(
    agent: Agent[Any],
    pause_id: str,
    *,
    store: Store,
    who: str,
    decisions: Mapping[str, str] | None = None,
    why: str = "",
    task_id: str | None = None,
    rejection_message: str | None = None,
    context_deserializer: Callable[[Mapping[str, Any]], Any] | None = None,
    context_override: Any = None,
    policy: Policy | None = None,
    secrets: Iterable[str] = (),
    **run_options: Any,
) -> Outcome:
    """Resume a stored approval pause under the same task: same global budget, counters continuing.

    Args:
        agent: the application's agent (the same graph that paused; agents are matched by name).
        pause_id: the pause to resume (``Outcome.pause_id``).
        store: the task's store (the one the pause was saved in).
        who: who resumes (recorded in the ``resume`` transition with the time and the decisions applied).
        decisions: ``{call_id: "approve" | "reject"}`` for every pending call of this pause and nothing else;
            ``None`` applies the decisions an operator recorded (``loopguard approve``, ``approvals.decide``).
        why: recorded with the transition.
        task_id: optional: the task the caller means; a pause of another task is refused.
        rejection_message: what the model reads for a rejected call (the SDK's default otherwise).
        context_deserializer, context_override: as for ``RunState.from_string`` (a context that is not a dict).
        policy, secrets: the task's :class:`~agents_loopguard.Policy` and secrets, as the application runs it.
        **run_options: passed to :func:`~agents_loopguard.sdk.run_guarded` (``verify_output``, ``on_refusal``,
            ``on_pause``, ``hooks``, ``run_config``, ``context``...).

    Raises (before the pause is claimed and before anything runs): :class:`ResumeError`,
    :class:`~agents_loopguard.approvals.PauseTampered`, :class:`~agents_loopguard.approvals.DecisionError`, and
    :class:`~agents_loopguard.PauseAlreadyResumed` when another process resumed it (or won the race to).

    >>> import asyncio
    >>> from agents import Agent, function_tool, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, assistant_message, function_call
    >>> from agents_loopguard import Budget, MemoryStore
    >>> from agents_loopguard.approvals import decide
    >>> from agents_loopguard.sdk import run_guarded
    >>> set_tracing_disabled(True)
    >>> @function_tool(needs_approval=True)
    ... def wipe(disk: str) -> str:
    ...     '''Wipe a disk.'''
    ...     return "wiped"
    >>> def ops_agent(*steps):
    ...     return Agent(name="ops", model=ScriptedModel(list(steps)), tools=[wipe])
    >>> store = MemoryStore()
    >>> paused = asyncio.run(run_guarded(ops_agent([function_call("wipe", {"disk": "d1"}, call_id="c1")]),
    ...     "wipe d1", budget=Budget(model_turns=4, tool_executions=2), store=store, task_id="ops-1"))
    >>> _ = decide(store, paused.pause_id, who="ana", approve_all=True)
    >>> resumed = asyncio.run(resume_guarded(ops_agent([assistant_message("done")]), paused.pause_id,
    ...                                      store=store, who="worker-2"))
    >>> paused.used.models, resumed.used.models, resumed.used.tools, store.transitions("ops-1")[0].decisions
    (1, 2, 1, {'c1': 'approve'})
    """
    if not who:
        raise DecisionError("a resume is recorded with who resumes: pass who=")
    for key in ("guard", "budget"):
        if key in run_options:
            raise TypeError(f"resume_guarded() got {key}=: a resume continues the pause's own task and budget")
    record = _load(store, pause_id, task_id)
    chosen = _decisions_for(record, decisions)
    state = await _restore(agent, record, context_deserializer=context_deserializer, context_override=context_override)
    claimed, transition = _claim(store, record, chosen, who=who, why=why, given=decisions is not None)
    checked = (record.task_id, record.state, record.pending_calls, record.digest)
    if (claimed.task_id, claimed.state, claimed.pending_calls, claimed.digest) != checked:
        # changed between our checks and the claim: refuse what we did not check
        raise PauseTampered(
            f"pause {pause_id!r} changed while it was being resumed: refused and nothing was run, but the pause is "
            f"claimed: investigate before reopening task {claimed.task_id!r}"
        )
    applied: Mapping[str, str] = transition.decisions
    for item in state.get_interruptions():
        if applied[str(item.call_id)] == APPROVE:
            state.approve(item)
        else:
            state.reject(item, rejection_message=rejection_message)
    guard = Guard(budget=claimed.budget, store=store, task_id=claimed.task_id, policy=policy, secrets=secrets)
    run_options.setdefault("on_pause", persist_pause)
    return await run_guarded(agent, state, guard=guard, **run_options)


def resume_guarded_sync(agent: Agent[Any], pause_id: str, **kwargs: Any) -> Outcome:
    """:func:`resume_guarded` for synchronous code (same arguments). Not callable while an event loop is running.

    >>> from agents import Agent, function_tool, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, assistant_message, function_call
    >>> from agents_loopguard import Budget, MemoryStore
    >>> from agents_loopguard.sdk import run_guarded_sync
    >>> set_tracing_disabled(True)
    >>> @function_tool(needs_approval=True)
    ... def wipe(disk: str) -> str:
    ...     '''Wipe a disk.'''
    ...     return "wiped"
    >>> store = MemoryStore()
    >>> model = ScriptedModel([[function_call("wipe", {"disk": "d1"}, call_id="c1")], [assistant_message("ok")]])
    >>> agent = Agent(name="ops", model=model, tools=[wipe])
    >>> paused = run_guarded_sync(agent, "wipe d1", budget=Budget(4, 2), store=store, task_id="ops-2")
    >>> resume_guarded_sync(agent, paused.pause_id, store=store, who="ana", decisions={"c1": "reject"}).used
    Usage(models=2, tools=0, cost=0.0)
    """
    return run_sync(lambda: resume_guarded(agent, pause_id, **kwargs), name="resume_guarded")
