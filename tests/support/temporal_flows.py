"""Temporal workflows and activities for tests/test_durable_temporal.py (the workflow module the worker's sandbox
imports; everything it needs from outside is passed through).

Each workflow returns what ``run_guarded_temporal`` concluded (:func:`_summary`): the task's outcome as the
conclusion activity stored it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agents import Agent, MaxTurnsExceeded, ModelSettings, Runner, function_tool
    from temporalio.openai_agents.workflow import activity_as_tool

    from agents_loopguard import Outcome, RunOptions
    from agents_loopguard.durable.temporal import check_tools, guarded_activity, run_guarded_temporal
    from agents_loopguard.values.probes import committed, not_committed

WRITES: list[Path] = []
"""The file each refund body appends a line to (set by the test before the worker starts)."""
AFTER_WRITE: list[Callable[[int], None]] = [lambda order: None]
"""What happens right after a refund's write (the in-process test fails the attempt once; a worker process may
SIGKILL itself there)."""
BEFORE_VERIFY: list[Callable[[int], None]] = [lambda order: None]
"""What happens between a refund's write and its verify."""
BEFORE_WRITE: list[Callable[[int], None]] = [lambda order: None]
"""What happens before a probed refund's write (a worker process may SIGKILL itself there)."""
OPTIONS: list[RunOptions] = []
"""The guard's options for the tool activities (set by the test: the store and the budget)."""
ONCE = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=5)


def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
    BEFORE_VERIFY[0](args["order"])
    done = f"refund-{args['order']}" in WRITES[0].read_text().split()
    return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}


@activity.defn
@guarded_activity(
    kind="write", operation_id=lambda args: f"refund-{args['order']}", verify=refunded, options=lambda: OPTIONS[0]
)
async def refund(order: int) -> str:
    """Refund an order (the write: a line in the log)."""
    with WRITES[0].open("a") as log:
        log.write(f"refund-{order}\n")
    AFTER_WRITE[0](order)
    return f"refunded order {order}"


def in_the_log(operation_id: str, args: dict[str, Any]) -> Any:
    """The refund's probe: the receiver (the log) asked, read-only, whether it holds the refund."""
    if operation_id not in WRITES[0].read_text().split():
        return not_committed(evidence=f"no {operation_id} in the log")
    return committed(f"refunded order {args['order']}", evidence=f"{operation_id} in the log")


@activity.defn(name="refund")
@guarded_activity(
    kind="write",
    operation_id=lambda args: f"refund-{args['order']}",
    verify=refunded,
    probe=in_the_log,
    options=lambda: OPTIONS[0],
)
async def probed_refund(order: int) -> str:
    """Refund an order (the write: a line in the log; the refund has a probe)."""
    BEFORE_WRITE[0](order)
    with WRITES[0].open("a") as log:
        log.write(f"refund-{order}\n")
    AFTER_WRITE[0](order)
    return f"refunded order {order}"


probed_refund.__name__ = "refund"  # the tool the model calls (activity_as_tool names it by the function)


@activity.defn
@guarded_activity(options=lambda: OPTIONS[0])
async def lookup(order: int, page: int) -> str:
    """Read one page of an order's history."""
    return f"order {order}, page {page}: nothing new"


@activity.defn
async def unguarded_lookup(order: int, page: int) -> str:
    """Read one page of an order's history (an activity nobody guarded)."""
    return f"order {order}, page {page}: nothing new"


@function_tool
def plain_refund(order: int) -> str:
    """Refund an order (a plain function tool: it would run as workflow code)."""
    with WRITES[0].open("a") as log:
        log.write(f"refund-{order}\n")
    return f"refunded order {order}"


def _summary(outcome: Outcome) -> dict[str, Any]:
    return {
        "status": str(outcome.status),
        "reason": str(outcome.reason),
        "models": outcome.used.models,
        "tools": outcome.used.tools,
        "task_id": outcome.task_id,
        "detail": outcome.detail,
    }


def _tools(work: str, queue: str | None) -> list[Any]:
    timeout = timedelta(seconds=3 if queue else 20)  # a dead worker's attempt times out
    if work == "plain":
        return [plain_refund]
    fn = {"refund": refund, "probed": probed_refund, "lookup": lookup, "unguarded": unguarded_lookup}[work]
    return [activity_as_tool(fn, task_queue=queue, start_to_close_timeout=timeout, retry_policy=ONCE)]


def _agent(work: str, queue: str | None) -> Agent[Any]:
    settings = ModelSettings(max_tokens=64)
    return Agent(name="refunds", model="gpt-4.1-mini", tools=_tools(work, queue), model_settings=settings)


@workflow.defn
class AgentFlow:
    """One agent run: ``work`` ``refund`` (the refund tool activity), ``lookup`` (a model that never stops),
    ``plain`` (a plain function tool) or ``unguarded`` (an activity nobody guarded)."""

    @workflow.run
    async def run(self, work: str, order: int, queue: str | None = None) -> dict[str, Any]:
        verb = "lookup" if work in ("lookup", "unguarded") else "refund"
        conclusion = {"task_queue": queue} if queue else None
        outcome = await run_guarded_temporal(_agent(work, queue), f"{verb} order {order}", conclusion=conclusion)
        return _summary(outcome)


@workflow.defn
class ChainFlow:
    """A lookup agent run two turns at a time, each run of the chain continuing as new; the last one concludes."""

    @workflow.run
    async def run(self, order: int, runs_left: int) -> dict[str, Any]:
        agent = _agent("lookup", None)
        if runs_left > 1:
            with contextlib.suppress(MaxTurnsExceeded):  # the run's turns are spent: the next run goes on
                await Runner.run(check_tools(agent), f"lookup order {order}", max_turns=2)
            workflow.continue_as_new(args=[order, runs_left - 1])
        return _summary(await run_guarded_temporal(agent, f"lookup order {order}", max_turns=2))
