"""A Restate handler process for tests/test_durable_restate.py: an Agents SDK agent in a Restate service handler,
guarded by ``run_guarded_restate``, served by hypercorn (HTTP/2, as restate-server calls it), talking to the test's
scripted OpenAI-compatible server over HTTP. Its one real side effect is a refund per body run
(tests/support/durable_cases.py: a line in ``writes.log``).

``python -m tests.workers.restate_worker CONFIG_JSON`` serves (once the file ``go`` names exists, if it names one)
until it is killed. Each invocation names its own kill point and tag; the process kills itself the first time an
invocation reaches its point (a marker file per tag: never in the retry). The kill points are durable_cases'
(``in-step``: inside the body's ``ctx.run`` after its write), and ``after-refusal`` (the guard's refusal journaled,
before the task's outcome is stored) and ``after-outcome`` (the task's outcome stored, before the handler returned
it).

The refund tool's ``body`` is ``refund`` (a plain guarded function tool) or ``journaled`` (its write inside
``ctx.run_typed("charge", ...)``, Restate's own way to journal a side effect). Services: ``refunds`` (a Service),
``desks`` (a Virtual Object keyed by the task: its handler runs the task named by its key).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import restate
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIProvider, RunConfig, set_tracing_disabled
from agents.models.interface import Model
from hypercorn.asyncio import serve
from hypercorn.config import Config
from restate.ext.openai import restate_context

from agents_loopguard import Budget
from agents_loopguard.durable import restate as guarded_restate
from agents_loopguard.durable.restate import run_guarded_restate
from agents_loopguard.run.durable import Replay
from agents_loopguard.sdk import guarded_tool
from agents_loopguard.store import SQLStore
from tests.support.durable_cases import KillInStep, Kills, Points, Refunds, model_client, operation_id, result

CONFIG: dict[str, Any] = json.loads(sys.argv[1]) if __name__ == "__main__" else {"folder": "."}  # pytest collects it
FOLDER = Path(CONFIG["folder"])
KILLS = Kills(FOLDER)
REFUNDS = Refunds(FOLDER, KILLS)
set_tracing_disabled(True)


@guarded_tool(kind="write", operation_id=operation_id, verify=REFUNDS.verify)
def refund(order: int) -> str:
    """Refund an order."""
    written = REFUNDS.write(order)
    KILLS("in-tool")
    return written


@guarded_tool(
    kind="write", operation_id=operation_id, verify=REFUNDS.verify, probe=REFUNDS.probe, name_override="refund"
)
def probed_refund(order: int) -> str:
    """Refund an order (the refund has a probe: the receiver is asked when its answer was lost)."""
    KILLS("before-write")
    written = REFUNDS.write(order)
    KILLS("in-tool")
    return written


@guarded_tool(kind="write", operation_id=operation_id, verify=REFUNDS.verify, name_override="refund")
async def journaled_refund(order: int) -> str:
    """Refund an order (the write journaled by Restate: ``ctx.run``)."""
    written = await restate_context().run_typed("charge", REFUNDS.write, restate.RunOptions(), order)
    KILLS("in-tool")
    return written


@guarded_tool(kind="write", operation_id=operation_id, verify=REFUNDS.verify, name_override="refund")
async def slow_refund(order: int) -> str:
    """Refund an order, then wait for the bank's confirmation (a journaled sleep: a cancellation reaches it)."""
    written = REFUNDS.write(order)
    (FOLDER / f"body-started-{order}").write_text("")
    await restate_context().sleep(timedelta(seconds=20))
    (FOLDER / f"body-ended-{order}").write_text("")
    return written


@guarded_tool(kind="write", operation_id=operation_id, verify=REFUNDS.verify, name_override="refund")
async def slow_plain_refund(order: int) -> str:
    """Refund an order, then wait without Restate (a cancellation cannot reach the body)."""
    written = REFUNDS.write(order)
    (FOLDER / f"body-started-{order}").write_text("")
    await asyncio.sleep(3)
    (FOLDER / f"body-ended-{order}").write_text("")
    return written


@guarded_tool
def lookup(order: int, page: int) -> str:
    """Read one page of an order's history."""
    return f"order {order}, page {page}: nothing new"


class KillingProvider(OpenAIProvider):
    """The application's own provider (models named by a string), each model with the in-step kill point."""

    def get_model(self, model_name: str | None) -> Model:
        return KillInStep(super().get_model(model_name), KILLS)


_journaled_response = guarded_restate.JournaledModel.get_response


async def _journaled_then_kill(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The kill point ``after-refusal``: the guard's refusal came out of the journaled block (Restate recorded it),
    before the run's outcome is stored. (The one seam of this worker: our own journaled call, wrapped.)"""
    try:
        return await _journaled_response(self, *args, **kwargs)
    except restate.TerminalError:
        KILLS("after-refusal")
        raise


guarded_restate.JournaledModel.get_response = _journaled_then_kill  # type: ignore[method-assign]


def agent(work: str, by_name: bool) -> Agent[Any]:
    model: Any = "gpt-4.1-mini"
    if not by_name:  # a Model instance on the agent (Restate's DurableRunner would not journal it)
        inner = OpenAIChatCompletionsModel(model="gpt-4.1-mini", openai_client=model_client(CONFIG["base_url"], KILLS))
        model = KillInStep(inner, KILLS)
    tools = {
        "refund": [refund],
        "probed": [probed_refund],
        "journaled": [journaled_refund],
        "lookup": [lookup],
        "slow": [slow_refund],
        "slow-plain": [slow_plain_refund],
    }[work]
    return Agent(name="refunds", model=model, tools=tools, model_settings=ModelSettings(max_tokens=64))


async def _run(ctx: restate.Context, request: dict[str, Any], task_id: str | None) -> dict[str, Any]:
    KILLS.arm(request.get("kill", ""), request.get("tag", ""))
    store = SQLStore(CONFIG["store_url"])
    budget = Budget(model_turns=request.get("model_turns", 6), tool_executions=request.get("tool_executions", 4))
    by_name = bool(request.get("by_name"))
    provider = KillingProvider(openai_client=model_client(CONFIG["base_url"], KILLS), use_responses=False)
    config = RunConfig(model_provider=provider) if by_name else None
    work = request.get("work", "refund")
    try:
        outcome = await run_guarded_restate(
            agent(work, by_name),
            f"{'lookup' if work == 'lookup' else 'refund'} order {request['order']}",
            hooks=Points(KILLS),
            run_config=config,
            budget=budget,
            store=store,
            task_id=task_id,
        )
    finally:
        store.close()
    KILLS("after-outcome")
    replay = isinstance(outcome.result, Replay)
    return result(outcome, invocation=ctx.request().id, task_id=outcome.task_id, replay=replay)


service = restate.Service("refunds")
desks = restate.VirtualObject("desks")


@service.handler()
async def run(ctx: restate.Context, request: dict[str, Any]) -> dict[str, Any]:
    return await _run(ctx, request, request.get("task_id"))


@desks.handler()
async def handle(ctx: restate.ObjectContext, request: dict[str, Any]) -> dict[str, Any]:
    return await _run(ctx, request, ctx.key())


async def main() -> None:
    go = Path(CONFIG["go"]) if CONFIG.get("go") else None
    while go is not None and not go.exists():  # started early, imported, listening only once the test says so
        await asyncio.sleep(0.01)
    config = Config()
    config.bind = [f"127.0.0.1:{CONFIG['port']}"]
    config.h2_max_concurrent_streams = 2**31 - 1
    config.accesslog = config.errorlog = None

    async def ready() -> None:
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", CONFIG["port"])
            except OSError:
                await asyncio.sleep(0.02)
                continue
            writer.close()
            (FOLDER / f"ready-{os.getpid()}").write_text("")
            return

    asyncio.get_running_loop().create_task(ready())
    await serve(restate.app([service, desks]), config)  # type: ignore[arg-type]


if __name__ == "__main__":
    asyncio.run(main())
