"""Temporal workflows and activities for tests/test_durable_temporal.py (the workflow module the worker's sandbox
imports; everything it needs from outside is passed through)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agents import Agent, ModelSettings, Runner
    from temporalio.openai_agents.workflow import activity_as_tool

    from agents_loopguard import RunOptions
    from agents_loopguard.durable.temporal import guarded_activity, refusal_of

WRITES: list[Path] = []
"""The file each refund body appends a line to (set by the test before the worker starts)."""
AFTER_WRITE: list[Callable[[int], None]] = [lambda order: None]
"""What happens right after a refund's write (the in-process test fails the attempt once; a worker process may
SIGKILL itself there)."""
BEFORE_VERIFY: list[Callable[[int], None]] = [lambda order: None]
"""What happens between a refund's write and its verify."""
OPTIONS: list[RunOptions] = []
"""The guard's options for the tool activities (set by the test: the store and the budget)."""


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


@activity.defn
@guarded_activity(options=lambda: OPTIONS[0])
async def lookup(order: int, page: int) -> str:
    """Read one page of an order's history."""
    return f"order {order}, page {page}: nothing new"


@workflow.defn
class AgentFlow:
    """One agent run: ``work`` ``refund`` (the refund tool activity) or ``lookup`` (a model that never stops)."""

    @workflow.run
    async def run(self, work: str, order: int, queue: str | None = None) -> dict[str, Any]:
        once = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=5)
        tool = activity_as_tool(
            refund if work == "refund" else lookup,
            task_queue=queue,
            start_to_close_timeout=timedelta(seconds=3 if queue else 20),  # a dead worker's attempt times out
            retry_policy=once,
        )
        agent = Agent(name="refunds", model="gpt-4.1-mini", tools=[tool], model_settings=ModelSettings(max_tokens=64))
        try:
            result = await Runner.run(agent, f"{work} order {order}")
        except Exception as exc:
            verdict = refusal_of(exc)
            if verdict is None:
                raise
            return {"refused": str(verdict.reason), "error": type(exc).__name__}
        return {"output": str(result.final_output)}
