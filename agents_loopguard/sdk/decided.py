"""Resume decided pauses without writing a poller: a worker picks up the pauses of given tasks or task families once
an operator decided them, each claimed once across every worker, the task's counters continuing.

An operator decides in the console, the API or ``loopguard approve``; the decision is stored (and, with
``$LOOPGUARD_DECISION_WEBHOOK``, posted as a signed webhook). :func:`resume_decided` finds the decided pauses
(:func:`agents_loopguard.ops.decisions.decided_pauses`) and resumes each with
:func:`~agents_loopguard.sdk.resume_guarded`: the checks, the one claim that wins, the decisions applied, the same
task and global budget. Run it in as many processes as you like: a pause that another worker claimed first is
reported as such, never run twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agents import Agent
from typing_extensions import Unpack

from ..ops.approvals import DecisionError, PauseKeyMissing, PauseTampered, ResumeError
from ..ops.decisions import decided_pauses, pauses_waiting
from ..run import RunOptions
from ..store.base import PauseAlreadyResumed, PauseRecord
from ..store.defaults import default_store
from ..values.outcome import Outcome
from .resume import resume_guarded
from .run import SdkRunFields, run_sync

__all__ = ["ResumedPause", "resume_decided", "resume_decided_sync"]

log = logging.getLogger("agents_loopguard.sdk.decided")
AgentFor = Callable[[PauseRecord], Agent[Any]]
"""Which agent resumes a pause (one per family, say): the graph that paused it, rebuilt by the application."""
_REFUSED = (ResumeError, DecisionError, PauseTampered, PauseKeyMissing)


@dataclass(frozen=True)
class ResumedPause:
    """What :func:`resume_decided` did with one decided pause."""

    pause_id: str
    task_id: str
    outcome: Outcome | None = None
    """The outcome of the run this worker resumed; None when it did not resume it (see :attr:`skipped`)."""
    skipped: str | None = None
    """Why this worker did not resume it: another worker claimed it first, or why it was refused (a pause refused
    before its claim stays decided, for a worker with the right agent or for an operator)."""
    claimed_elsewhere: bool = False
    """True when another worker (or process) claimed the pause first."""


async def resume_decided(
    agent: Agent[Any] | AgentFor,
    *,
    tasks: Iterable[str] = (),
    families: Iterable[str] = (),
    wait: float | None = 0.0,
    poll: float = 1.0,
    options: RunOptions | None = None,
    **fields: Unpack[SdkRunFields],
) -> list[ResumedPause]:
    """Resume every decided pause of ``tasks`` and of the tasks of ``families``, once across all workers.

    Args:
        agent: the application's agent (the graph that paused), or ``agent(pause)`` choosing one per pause.
        tasks, families: whose pauses to resume (at least one of the two).
        wait: ``0`` sweeps once; a number keeps sweeping every ``poll`` seconds for that long (with ``tasks`` only,
            it returns as soon as none of them has a pause left pending or decided); ``None`` sweeps until the
            caller cancels it.
        options, **fields: as for :func:`~agents_loopguard.sdk.resume_guarded`: ``who=`` (required, recorded with
            each resume), ``store=`` (default: the persistent store ``run_guarded`` uses), ``policy=``, ``hooks=``...

    Returns what happened to each decided pause this call met, in order. A pause another worker claimed first
    (``claimed_elsewhere``) and a pause refused before its claim (a tampered digest, a state this agent cannot
    restore) are reported and skipped, never raised: a worker keeps serving the others.

    >>> import asyncio
    >>> from agents import Agent, function_tool, set_tracing_disabled
    >>> from agents.testing import ScriptedModel, assistant_message, function_call
    >>> from agents_loopguard import Budget, MemoryStore
    >>> from agents_loopguard.ops.approvals import decide
    >>> from agents_loopguard.sdk import run_guarded_sync
    >>> set_tracing_disabled(True)
    >>> @function_tool(needs_approval=True)
    ... def wipe(disk: str) -> str:
    ...     '''Wipe a disk.'''
    ...     return "wiped"
    >>> store = MemoryStore()
    >>> model = ScriptedModel([[function_call("wipe", {"disk": "d1"}, call_id="c1")], [assistant_message("done")]])
    >>> agent = Agent(name="ops", model=model, tools=[wipe])
    >>> paused = run_guarded_sync(agent, "wipe d1", budget=Budget(4, 2), store=store, task_id="ops-7")
    >>> _ = decide(store, paused.pause_id, who="ana", approve_all=True)
    >>> [done] = asyncio.run(resume_decided(agent, tasks=["ops-7"], store=store, who="worker-1"))
    >>> done.outcome.used.models, store.pause(paused.pause_id).resumed_by  # the counters continue: 1 turn, then 2
    (2, 'worker-1')
    >>> asyncio.run(resume_decided(agent, tasks=["ops-7"], store=store, who="worker-2"))  # nothing left
    []
    """
    wanted, named = list(dict.fromkeys(tasks)), list(dict.fromkeys(families))
    if not wanted and not named:
        raise ValueError("resume_decided() resumes the pauses of given tasks= or families=: name at least one")
    if (wait is not None and wait < 0) or poll <= 0:
        raise ValueError("wait must be >= 0 (or None) and poll > 0")
    passed: dict[str, Any] = dict(fields)
    if not (passed.get("who") or (options is not None and options.who)):
        raise DecisionError("a resume is recorded with who resumes: pass who=")
    store = passed.get("store") or (options.store if options is not None else None) or default_store()
    passed["store"] = store
    give_up = None if wait is None else time.monotonic() + wait
    met: dict[str, ResumedPause] = {}
    while True:
        for record in decided_pauses(store, tasks=wanted, families=named):
            if record.pause_id not in met:
                met[record.pause_id] = await _resume_one(agent, record, options, passed)
        if give_up is not None and time.monotonic() >= give_up:
            break
        if wanted and not named and all(p.pause_id in met for p in pauses_waiting(store, wanted)):
            break  # nothing of these tasks is left to decide or to resume (what is left was refused here)
        await asyncio.sleep(poll if give_up is None else min(poll, max(0.0, give_up - time.monotonic())))
    return list(met.values())


async def _resume_one(
    agent: Agent[Any] | AgentFor, record: PauseRecord, options: RunOptions | None, fields: dict[str, Any]
) -> ResumedPause:
    try:
        chosen = agent if isinstance(agent, Agent) else agent(record)
        outcome = await resume_guarded(chosen, record.pause_id, options=options, **fields)
    except PauseAlreadyResumed as exc:
        return ResumedPause(record.pause_id, record.task_id, skipped=str(exc), claimed_elsewhere=True)
    except _REFUSED as exc:
        log.warning("pause %s of task %s not resumed: %s", record.pause_id, record.task_id, exc)
        return ResumedPause(record.pause_id, record.task_id, skipped=f"{type(exc).__name__}: {exc}")
    return ResumedPause(record.pause_id, record.task_id, outcome=outcome)


def resume_decided_sync(agent: Agent[Any] | AgentFor, **kwargs: Any) -> list[ResumedPause]:
    """:func:`resume_decided` for synchronous code (same arguments). Not callable while an event loop is running."""
    return run_sync(lambda: resume_decided(agent, **kwargs), name="resume_decided")
