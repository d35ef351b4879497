"""Resume a stored approval pause once, in any process, with the task's counters continuing.

The checks (digest, decisions, the pause's task, resumed once) and the claim are framework-free
(:mod:`agents_loopguard.ops.approvals`); this module restores the SDK's ``RunState`` against the application's agents,
applies the decisions to exactly the pause's pending calls, and continues the run under the *same* task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agents import Agent, RunState
from typing_extensions import Unpack

from ..ops.approvals import (
    APPROVE,
    DecisionError,
    ResumeError,
    claim_for_resume,
    decisions_for,
    load_for_resume,
)
from ..run import RunOptions
from ..store.base import PauseRecord, Store
from ..store.defaults import default_store
from ..values.outcome import Outcome
from .claims import ClaimedState
from .run import RUNNER_KEYWORDS, SdkRunFields, run_guarded, run_sync

__all__ = ["claim_pause", "decided_state", "resume_guarded", "resume_guarded_sync"]


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
    decisions: Mapping[str, str] | None = None,
    why: str = "",
    rejection_message: str | None = None,
    context_deserializer: Callable[[Mapping[str, Any]], Any] | None = None,
    context_override: Any = None,
    options: RunOptions | None = None,
    **fields: Unpack[SdkRunFields],
) -> Outcome:
    """Resume a stored approval pause under the same task: same global budget, counters continuing.

    Args:
        agent: the application's agent (the same graph that paused; agents are matched by name).
        pause_id: the pause to resume (``Outcome.pause_id``).
        decisions: ``{call_id: "approve" | "reject"}`` for every pending call of this pause and nothing else;
            ``None`` applies the decisions an operator recorded (``loopguard approve``, ``approvals.decide``).
        why: recorded with the transition.
        rejection_message: what the model reads for a rejected call (the SDK's default otherwise).
        context_deserializer, context_override: as for ``RunState.from_string`` (a context that is not a dict).
        options, **fields: ``who=`` (required): who resumes, recorded in the ``resume`` transition with the time and
            the decisions applied; the run's :class:`~agents_loopguard.RunOptions` (``store=``: the store the pause was
            saved in, default the persistent store ``run_guarded`` uses; ``task_id=``: optional, the task the
            caller means, a pause of another task is refused; ``policy=``, ``secrets=``, ``verify_output=``,
            ``on_refusal=``, ``on_pause=``...) and ``Runner.run``'s keywords (``hooks``, ``run_config``,
            ``context``...). A resume continues the pause's own task and budget: ``guard=`` and ``budget=`` are
            refused.

    Raises (before the pause is claimed and before anything runs): :class:`ResumeError`,
    :class:`~agents_loopguard.ops.approvals.PauseTampered`, :class:`~agents_loopguard.ops.approvals.DecisionError`, and
    :class:`~agents_loopguard.PauseAlreadyResumed` when another process resumed it (or won the race to).

    >>> import asyncio
    >>> from agents import Agent, function_tool, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, assistant_message, function_call
    >>> from agents_loopguard import Budget, MemoryStore
    >>> from agents_loopguard.ops.approvals import decide
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
    passed: dict[str, Any] = dict(fields)
    runner = {name: passed.pop(name) for name in RUNNER_KEYWORDS if name in passed}
    opts = RunOptions.merge(options, passed)
    who = opts.who
    if not who:
        raise DecisionError("a resume is recorded with who resumes: pass who=")
    if opts.guard is not None or opts.budget is not None:
        named = "guard" if opts.guard is not None else "budget"
        raise TypeError(f"resume_guarded() got {named}=: a resume continues the pause's own task and budget")
    store = opts.store if opts.store is not None else default_store()
    restore = {"context_deserializer": context_deserializer, "context_override": context_override}
    claimed, applied = await claim_pause(agent, store, pause_id, decisions, who=who, why=why, task_id=opts.task_id)
    state = await decided_state(agent, claimed, applied, rejection_message=rejection_message, **restore)
    resumed = opts.continuing(None, task_id=claimed.task_id, budget=claimed.budget, store=store)
    return await run_guarded(agent, ClaimedState(state), options=resumed, **runner)


async def claim_pause(
    agent: Agent[Any],
    store: Store,
    pause_id: str,
    decisions: Mapping[str, str] | None,
    *,
    who: str,
    why: str = "",
    task_id: str | None = None,
    context_deserializer: Callable[[Mapping[str, Any]], Any] | None = None,
    context_override: Any = None,
) -> tuple[PauseRecord, dict[str, str]]:
    """Check a stored pause (its digest, its task, the decisions, that ``agent``'s graph restores its run state) and
    claim it once: the claimed pause and the decisions applied. The first half of :func:`resume_guarded` (a durable
    engine records it as one step, so a replay never claims twice)."""
    record = load_for_resume(store, pause_id, task_id=task_id)
    chosen = decisions_for(record, decisions)
    await _restore(agent, record, context_deserializer=context_deserializer, context_override=context_override)
    claimed, transition = claim_for_resume(store, record, chosen, who=who, why=why, given=decisions is not None)
    return claimed, dict(transition.decisions)


async def decided_state(
    agent: Agent[Any],
    claimed: PauseRecord,
    applied: Mapping[str, str],
    *,
    rejection_message: str | None = None,
    context_deserializer: Callable[[Mapping[str, Any]], Any] | None = None,
    context_override: Any = None,
) -> RunState[Any]:
    """The claimed pause's run state restored against ``agent`` with the decisions applied: ready to run."""
    state = await _restore(agent, claimed, context_deserializer=context_deserializer, context_override=context_override)
    for item in state.get_interruptions():
        if applied[str(item.call_id)] == APPROVE:
            state.approve(item)
        else:
            state.reject(item, rejection_message=rejection_message)
    return state


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
