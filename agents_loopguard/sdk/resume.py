"""Resume a stored approval pause once, in any process, with the task's counters continuing.

The checks (digest, decisions, the pause's task, resumed once) and the claim are framework-free
(:mod:`agents_loopguard.approvals`); this module restores the SDK's ``RunState`` against the application's agents,
applies the decisions to exactly the pause's pending calls, and continues the run under the *same* task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agents import Agent, RunState

from ..approvals import (
    APPROVE,
    DecisionError,
    ResumeError,
    claim_for_resume,
    decisions_for,
    load_for_resume,
)
from ..budget import Policy
from ..core import Guard
from ..outcome import Outcome
from ..store.base import PauseRecord, Store
from ..store.defaults import default_store
from .claims import ClaimedState
from .pauses import persist_pause
from .run import run_guarded, run_sync

__all__ = ["resume_guarded", "resume_guarded_sync"]


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


async def resume_guarded(
    agent: Agent[Any],
    pause_id: str,
    *,
    store: Store | None = None,
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
        store: the task's store (the one the pause was saved in); by default the persistent store every entry point
            uses (``$LOOPGUARD_DATABASE_URL``, else ``./.loopguard/loopguard.db``), as for ``run_guarded``.
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
    store = store if store is not None else default_store()
    record = load_for_resume(store, pause_id, task_id=task_id)
    chosen = decisions_for(record, decisions)
    state = await _restore(agent, record, context_deserializer=context_deserializer, context_override=context_override)
    claimed, transition = claim_for_resume(store, record, chosen, who=who, why=why, given=decisions is not None)
    applied: Mapping[str, str] = transition.decisions
    for item in state.get_interruptions():
        if applied[str(item.call_id)] == APPROVE:
            state.approve(item)
        else:
            state.reject(item, rejection_message=rejection_message)
    guard = Guard(budget=claimed.budget, store=store, task_id=claimed.task_id, policy=policy, secrets=secrets)
    run_options.setdefault("on_pause", persist_pause)
    return await run_guarded(agent, ClaimedState(state), guard=guard, **run_options)


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
    Usage(models=2, tools=0, cost=0.0, input_tokens=0, output_tokens=0)
    """
    return run_sync(lambda: resume_guarded(agent, pause_id, **kwargs), name="resume_guarded")
