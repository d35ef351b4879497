"""A Restate handler process for tests/test_durable_restate.py: an Agents SDK agent in a Restate service handler,
guarded by ``run_guarded_restate``, served by hypercorn (HTTP/2, as restate-server calls it), talking to the test's
scripted OpenAI-compatible server over HTTP. Its one real side effect is a line appended to ``writes.log`` per refund
body that ran.

``python restate_worker.py CONFIG_JSON`` serves (once the file ``go`` names exists, if it names one) until it is
killed. Each invocation names its own kill point and tag; the process kills itself the first time an invocation
reaches its point (a marker file per tag: never in the retry). Kill points: ``before-model-2`` (before the second
model request), ``in-model-step`` (the first response arrived, inside the journaled block, before Restate recorded
it), ``after-model-1`` (the first model call journaled), ``in-tool`` (inside the refund body, after its write),
``in-verify`` (between the write and its verify), ``after-refusal`` (the guard's refusal journaled, before the task's
outcome is stored), ``after-outcome`` (the task's outcome stored, before the handler returned it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import restate
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    RunConfig,
    RunHooks,
    set_tracing_disabled,
)
from agents.models.interface import Model
from hypercorn.asyncio import serve
from hypercorn.config import Config
from openai import AsyncOpenAI

from agents_loopguard import Budget
from agents_loopguard.durable import restate as guarded_restate
from agents_loopguard.durable.restate import run_guarded_restate
from agents_loopguard.sdk import guarded_tool
from agents_loopguard.store import SQLStore

CONFIG: dict[str, Any] = json.loads(sys.argv[1]) if __name__ == "__main__" else {"folder": "."}  # pytest collects it
FOLDER = Path(CONFIG["folder"])
WRITES = FOLDER / "writes.log"
set_tracing_disabled(True)
PLAN: dict[str, str] = {}
"""The current invocation's kill point and tag (one invocation runs at a time in these tests)."""


def kill(point: str) -> None:
    """SIGKILL this process at ``point`` the first time the invocation's tag reaches it (never in the retry)."""
    marker = FOLDER / f"killed-{PLAN.get('tag')}"
    if PLAN.get("kill") == point and not marker.exists():
        marker.write_text(point)
        os.kill(os.getpid(), signal.SIGKILL)


def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
    kill("in-verify")
    done = f"refund-{args['order']}" in (WRITES.read_text().split() if WRITES.exists() else [])
    return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}


@guarded_tool(kind="write", operation_id=lambda args: f"refund-{args['order']}", verify=refunded)
def refund(order: int) -> str:
    """Refund an order."""
    with WRITES.open("a") as log:
        log.write(f"refund-{order}\n")
    kill("in-tool")
    return f"refunded order {order}"


@guarded_tool
def lookup(order: int, page: int) -> str:
    """Read one page of an order's history."""
    return f"order {order}, page {page}: nothing new"


class KillInStep(Model):
    """The real model, and a kill after its first response arrived (inside Restate's journaled block)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.model = getattr(inner, "model", None)

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        response = await self.inner.get_response(*args, **kwargs)
        kill("in-model-step")
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class KillingProvider(OpenAIProvider):
    """The application's own provider (models named by a string), each model with the in-step kill point."""

    def get_model(self, model_name: str | None) -> Model:
        return KillInStep(super().get_model(model_name))


_journaled_response = guarded_restate.JournaledModel.get_response


async def _journaled_then_kill(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The kill point ``after-refusal``: the guard's refusal came out of the journaled block (Restate recorded it),
    before the run's outcome is stored. (The one seam of this worker: our own journaled call, wrapped.)"""
    try:
        return await _journaled_response(self, *args, **kwargs)
    except restate.TerminalError:
        kill("after-refusal")
        raise


guarded_restate.JournaledModel.get_response = _journaled_then_kill  # type: ignore[method-assign]


class Points(RunHooks[Any]):
    def __init__(self) -> None:
        self.starts = self.ends = 0

    async def on_llm_start(self, *args: Any) -> None:
        self.starts += 1
        if self.starts == 2:
            kill("before-model-2")

    async def on_llm_end(self, *args: Any) -> None:
        self.ends += 1
        if self.ends == 1:
            kill("after-model-1")


def client() -> AsyncOpenAI:
    return AsyncOpenAI(base_url=CONFIG["base_url"], api_key="test", max_retries=0)


def agent(work: str, by_name: bool) -> Agent[Any]:
    model: Any = "gpt-4.1-mini"
    if not by_name:  # a Model instance on the agent (Restate's DurableRunner would not journal it)
        model = KillInStep(OpenAIChatCompletionsModel(model="gpt-4.1-mini", openai_client=client()))
    tools = [refund] if work == "refund" else [lookup]
    return Agent(name="refunds", model=model, tools=tools, model_settings=ModelSettings(max_tokens=64))


service = restate.Service("refunds")


@service.handler()
async def run(ctx: restate.Context, request: dict[str, Any]) -> dict[str, Any]:
    PLAN.clear()
    PLAN.update(kill=request.get("kill", ""), tag=request.get("tag", ""))
    store = SQLStore(CONFIG["store_url"])
    budget = Budget(model_turns=request.get("model_turns", 6), tool_executions=request.get("tool_executions", 4))
    by_name = bool(request.get("by_name"))
    config = RunConfig(model_provider=KillingProvider(openai_client=client(), use_responses=False)) if by_name else None
    work = request.get("work", "refund")
    try:
        outcome = await run_guarded_restate(
            agent(work, by_name),
            f"{work} order {request['order']}",
            hooks=Points(),
            run_config=config,
            budget=budget,
            store=store,
            task_id=request.get("task_id"),
        )
    finally:
        store.close()
    kill("after-outcome")
    return {
        "status": str(outcome.status),
        "reason": str(outcome.reason),
        "models": outcome.used.models,
        "tools": outcome.used.tools,
        "pid": os.getpid(),
        "invocation": ctx.request().id,
    }


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
    await serve(restate.app([service]), config)  # type: ignore[arg-type]


if __name__ == "__main__":
    asyncio.run(main())
