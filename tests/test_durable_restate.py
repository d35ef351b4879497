"""R17 on a real Restate (restate-server 1.7 from npm, restate-sdk 1.2): an Agents SDK agent in a Restate handler,
guarded by ``run_guarded_restate``; each handler process SIGKILLed at a point of the run, and the invocation retried
by restate-server against the process that replaces it.

Every handler is a real OS process (tests/workers/restate_worker.py) serving the service over HTTP/2; the model is the
real ``openai`` client over HTTP against the scripted server in this process, so the requests the server received are
counted here, not read back from the store under test. The one side effect is a line per refund body in
``writes.log``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard.store import SQLStore
from tests.support.restate_server import RestateServer, free_port, restate_server
from tests.support.scripted_openai import JSON, ScriptedOpenAIServer, Step, dynamic, final_text, tool_call

pytestmark = pytest.mark.timeout(600)

WORKER = Path(__file__).parent / "workers" / "restate_worker.py"
POINTS = {  # kill point -> the outcome after Restate retried the invocation
    "before-model-2": ("completed", "validated_done"),
    "in-model-step": ("completed", "validated_done"),
    "after-model-1": ("completed", "validated_done"),
    "in-tool": ("needs_reconciliation", "unknown_commit"),
    "in-verify": ("needs_reconciliation", "unknown_commit"),
}
ROUNDS = int(os.environ.get("LG_RESTATE_ROUNDS", "2"))
"""Rounds per kill point (each one a handler process killed and its successor started)."""


def _order_of(body: JSON) -> int:
    text = json.dumps(body.get("messages", []))
    found = re.search(r"(?:refund|lookup) order (\d+)", text)
    assert found, f"a request without its order: {text[:200]}"
    return int(found.group(1))


def _answer(body: JSON) -> Step:
    """The model: refund the order the user names, then answer once the tool's output is in the conversation; asked
    to look an order up, it reads one more page every time (it never ends by itself)."""
    messages = body.get("messages", [])
    read = sum(message.get("role") == "tool" for message in messages)
    if "lookup order" in json.dumps(messages):
        return tool_call("lookup", {"order": _order_of(body), "page": read})
    if read:
        return final_text("refunded")
    return tool_call("refund", {"order": _order_of(body)})


class Cluster:
    """restate-server, the scripted model server, the guard's store (a SQLite file) and the handler processes, which
    all listen on one port registered once as the service's deployment."""

    def __init__(self, server: RestateServer, model: ScriptedOpenAIServer, folder: Path) -> None:
        self.server, self.model, self.folder = server, model, folder
        self.port = free_port()
        self.store_url = f"sqlite:///{folder / 'loopguard.sqlite'}"

    def handler(self, go: Path | None = None) -> subprocess.Popen[str]:
        """A new handler process (listening once ``go`` exists, if given: it imports meanwhile)."""
        config = {"folder": str(self.folder), "port": self.port, "base_url": self.model.base_url, "go": go and str(go)}
        return subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps({**config, "store_url": self.store_url})],
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "handlers.err", "a"),
            text=True,
            cwd=Path(__file__).parent.parent,
        )

    def listening(self, process: subprocess.Popen[str]) -> subprocess.Popen[str]:
        deadline = time.monotonic() + 60
        while not (self.folder / f"ready-{process.pid}").exists():
            assert process.poll() is None, f"the handler died: {(self.folder / 'handlers.err').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the handler did not listen in 60 s"
            time.sleep(0.02)
        return process

    def invoke(self, **request: Any) -> str:
        return self.server.send("refunds", "run", request)

    def requests_by_order(self) -> Counter[int]:
        bodies = [request.body for request in self.model.requests]
        assert all(isinstance(body, dict) for body in bodies)
        return Counter(_order_of(body) for body in bodies)

    def writes(self) -> Counter[str]:
        log = self.folder / "writes.log"
        return Counter(log.read_text().split()) if log.exists() else Counter()

    def store(self) -> SQLStore:
        return SQLStore(self.store_url)


@pytest.fixture(scope="module")
def restate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestateServer]:
    with restate_server(tmp_path_factory.mktemp("restate")) as server:
        yield server


@pytest.fixture
def cluster(restate: RestateServer, tmp_path: Path) -> Iterator[Cluster]:
    with ScriptedOpenAIServer([dynamic(_answer) for _ in range(300)]) as model:
        cluster = Cluster(restate, model, tmp_path)
        first = cluster.listening(cluster.handler())
        restate.register(f"http://127.0.0.1:{cluster.port}")
        _stop(first)
        yield cluster


def _stop(process: subprocess.Popen[str]) -> None:
    """A handler holds nothing to flush (its store commits every step): killed."""
    process.kill()
    process.wait(10)


def _killed_then_retried(cluster: Cluster, rounds: list[dict[str, Any]]) -> tuple[dict[str, Any], list[int]]:
    """Each round's invocation, sent to a handler that kills itself at the round's point; its successor (which
    then serves the next round) gets the retried invocation; it is started while the round runs, and listens once
    its predecessor died. The results by tag, and the handlers' pids."""
    current, pids, results = cluster.listening(cluster.handler()), [], {}
    successor = current
    try:
        for n, request in enumerate(rounds):
            go = cluster.folder / f"go-{n}"
            successor = cluster.handler(go)  # imports while this round runs
            invocation = cluster.invoke(**request)
            code = current.wait(timeout=120)
            assert code == -9, f"the handler was to be killed at {request['kill']}, it exited {code}"
            go.write_text("")
            current = cluster.listening(successor)
            pids.append(current.pid)
            results[request["tag"]] = {**cluster.server.result(invocation), "successor": current.pid}
    finally:
        _stop(current)
        if successor is not current:
            _stop(successor)
    return results, pids


def test_r17_killed_restate_handlers_run_every_write_once_with_exact_counters(cluster: Cluster) -> None:
    """Rules: R17 (durable replays count once), R6 (unknown blocks a resend), R1 (reserved before the call).

    Each round's handler process is SIGKILLed at its point; restate-server retries the invocation against the next
    process, which replays the journal (the model calls it recorded) and runs the rest. Every refund body ran once,
    each task's model turns equal the requests the scripted server received for its order, and each outcome is the
    one its kill point leads to. Half the rounds resolve the model by name through the application's provider, half
    hold a Model instance on the agent: both are journaled."""
    rounds = []
    for index, (point, n) in enumerate((p, n) for p in POINTS for n in range(ROUNDS)):
        order = 1000 + index + int(uuid.uuid4().int % 10**6) * 100
        rounds.append({"order": order, "kill": point, "tag": uuid.uuid4().hex[:10], "by_name": n % 2 == 1})
    results, _ = _killed_then_retried(cluster, rounds)
    requests, writes = cluster.requests_by_order(), cluster.writes()
    store = cluster.store()
    try:
        for request in rounds:
            point, order, result = request["kill"], request["order"], results[request["tag"]]
            task_id = result["invocation"]
            trace = [(e.kind, e.tool, e.result_class) for e in store.trace(task_id)]
            assert writes[f"refund-{order}"] == 1, (point, writes[f"refund-{order}"], trace)
            assert (result["status"], result["reason"]) == POINTS[point], (point, result, trace, requests[order])
            task = store.task(task_id)
            assert task is not None and task.used.models == requests[order] == result["models"], (point, trace)
            assert task.used.tools == 1, (point, task.used)
            assert result["pid"] == result["successor"], "the retried invocation ran in the successor"
    finally:
        store.close()
    assert sum(writes.values()) == len(rounds)


def test_r17_a_refusal_inside_the_journaled_call_is_terminal_and_the_run_ends_with_its_outcome(
    cluster: Cluster,
) -> None:
    """Rules: R17, R2 (the model budget), R15 (one outcome).

    The model never stops calling the lookup tool; the budget allows 2 model turns. The guard refuses the third
    call inside Restate's journaled block: a ``TerminalError``, so Restate records it and never retries the block
    (the scripted server receives exactly 2 requests), and the handler returns the task's outcome. Then the same
    refusal with the handler killed once the refusal is journaled, and once the outcome is stored: the retried
    invocation ends with the same outcome and asks the model nothing more."""
    orders = {"plain": 3001, "after-refusal": 3002, "after-outcome": 3003}
    common = {"work": "lookup", "model_turns": 2, "tool_executions": 10}
    handler = cluster.listening(cluster.handler())
    try:
        plain = cluster.server.result(cluster.invoke(order=orders["plain"], tag="plain", **common))
    finally:
        _stop(handler)
    rounds = [{"order": orders[p], "kill": p, "tag": uuid.uuid4().hex[:10], **common} for p in orders if p != "plain"]
    results, _ = _killed_then_retried(cluster, rounds)
    requests = cluster.requests_by_order()
    store = cluster.store()
    try:
        for name, result in [("plain", plain), *((r["kill"], results[r["tag"]]) for r in rounds)]:
            task = store.task(result["invocation"])
            assert task is not None and task.outcome is not None, name
            assert (result["status"], result["reason"]) == ("stopped", "model_budget"), (name, result)
            assert task.used.models == requests[orders[name]] == result["models"] == 2, (name, task.used)
    finally:
        store.close()
