"""A refund agent in a Restate handler, guarded: ``python examples/restate_refund.py`` (no API key).

Every step a user takes, in one program:

1. the service: a handler that runs the agent with ``run_guarded_restate`` (each model call journaled by Restate,
   the guard inside the journaled call; the refund's write journaled by the tool itself with ``ctx.run``);
2. serving it: ``restate.app([service])`` under hypercorn (HTTP/2, as restate-server calls it);
3. registering it: ``POST /deployments`` on restate-server's admin API, with the URL it is served at;
4. invoking it: ``POST /refunds/refund`` on the ingress, then reading the task back from the guard's store as an
   ``Outcome`` (``store.task(id).stored_outcome()``).

It needs a restate-server: ``RESTATE_SERVER`` names its binary (the tests use the npm registry's
``@restatedev/restate-server-linux-x64``), which this program starts on free ports of 127.0.0.1 with its data in a
temporary folder; without it, ``restate-server`` on the PATH. The guard's store is a SQLite file in that folder
(``LOOPGUARD_DATABASE_URL`` to use another). The model is scripted (``agents.testing.ScriptedModel``): it asks for
the refund once, then answers. The refund's operation id is its business key, the order (``refund-order-<n>``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import restate
from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from hypercorn.asyncio import serve
from hypercorn.config import Config
from restate.ext.openai import restate_context

from agents_loopguard import Budget
from agents_loopguard.durable.restate import run_guarded_restate
from agents_loopguard.sdk import guarded_tool
from agents_loopguard.store import SQLStore

FOLDER = Path(tempfile.mkdtemp(prefix="loopguard-restate-"))
STORE_URL = os.environ.get("LOOPGUARD_DATABASE_URL", f"sqlite:///{FOLDER / 'loopguard.sqlite'}")
REFUNDS: dict[int, int] = {}  # the payment system (here: a dict); each charge that really ran counts


def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
    """Ask the payment system, not the model."""
    done = REFUNDS.get(args["order"]) == args["amount"]
    return {"revision": 1 if done else 0, "done": done, "effect": "committed" if done else "not_committed"}


def charge(order: int, amount: int) -> str:
    REFUNDS[order] = amount
    return f"refunded {amount} EUR for order {order}"


@guarded_tool(kind="write", operation_id=lambda args: f"refund-order-{args['order']}", verify=refunded)
async def refund(order: int, amount: int) -> str:
    """Refund an order."""
    # the write journaled by Restate: a retried invocation gets its result from the journal, never a second charge
    return await restate_context().run_typed("charge", charge, restate.RunOptions(), order, amount)


service = restate.Service("refunds")


@service.handler()
async def refund_order(ctx: restate.Context, order: int) -> dict[str, Any]:
    asks = function_call("refund", {"order": order, "amount": 30}, call_id="call-refund")
    model = ScriptedModel([[asks], [assistant_message(f"Order {order} refunded.")]])
    agent = Agent(name="refunds", model=model, tools=[refund])
    store = SQLStore(STORE_URL)
    try:  # the task defaults to the invocation's id: a retried invocation continues it
        outcome = await run_guarded_restate(
            agent, f"refund order {order}", budget=Budget(model_turns=4, tool_executions=2), store=store
        )
    finally:
        store.close()
    return {"task_id": outcome.task_id, "status": str(outcome.status), "reason": str(outcome.reason)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


def start_restate_server(ingress: int, admin: int) -> subprocess.Popen[bytes]:
    binary = os.environ.get("RESTATE_SERVER") or shutil.which("restate-server")
    if not binary:
        raise SystemExit("set RESTATE_SERVER to a restate-server binary (npm: @restatedev/restate-server-linux-x64)")
    env = {
        **os.environ,
        "RESTATE_INGRESS__BIND_PORT": str(ingress),
        "RESTATE_ADMIN__BIND_PORT": str(admin),
        "RESTATE_BIND_PORT": str(free_port()),
        "RESTATE_ADMIN__DISABLE_WEB_UI": "true",
        "RESTATE_DISABLE_TELEMETRY": "true",
        "RESTATE_DEFAULT_NUM_PARTITIONS": "2",  # a small local server: starts in seconds
        "RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE": "256MiB",
    }
    command = [binary, "--base-dir", str(FOLDER / "restate"), "--bind-ip", "127.0.0.1", "--listen-mode", "tcp"]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1800):  # ready once both its ingress and its admin API answer
        try:
            http("GET", f"http://127.0.0.1:{admin}/health")
            http("GET", f"http://127.0.0.1:{ingress}/restate/health")
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("restate-server did not start")


async def main() -> None:
    set_tracing_disabled(True)
    ingress, admin, handlers = free_port(), free_port(), free_port()
    server = start_restate_server(ingress, admin)
    config = Config()
    config.bind = [f"127.0.0.1:{handlers}"]
    config.accesslog = config.errorlog = None
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(restate.app([service]), config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    try:
        await asyncio.sleep(0.5)  # hypercorn listening
        deployment = {"uri": f"http://127.0.0.1:{handlers}"}
        await asyncio.to_thread(http, "POST", f"http://127.0.0.1:{admin}/deployments", deployment)
        answer = await asyncio.to_thread(http, "POST", f"http://127.0.0.1:{ingress}/refunds/refund_order", 42)
        print(f"the handler answered: {answer['status']}/{answer['reason']}")
        store = SQLStore(STORE_URL)
        try:
            task = store.task(answer["task_id"])
            outcome = task.stored_outcome() if task is not None else None
        finally:
            store.close()
        assert outcome is not None
        print(f"the task in the store: {outcome.status}/{outcome.reason}, model turns {outcome.used.models}")
        print(f"charges run: {len(REFUNDS)}")
    finally:
        server.terminate()  # restate-server first (it holds connections to the handlers), then the handlers
        server.wait(10)
        stop.set()
        await asyncio.wait_for(serving, 10)
        shutil.rmtree(FOLDER, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
