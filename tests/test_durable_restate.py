"""R17 on a real Restate (restate-server 1.7 from npm, restate-sdk 1.2): an Agents SDK agent in a Restate handler,
guarded by ``run_guarded_restate``; each handler process SIGKILLed at a point of the run, and the invocation retried
by restate-server against the process that replaces it.

Every handler is a real OS process (tests/workers/restate_worker.py) serving the service over HTTP/2; the model is the
real ``openai`` client over HTTP against the scripted server in this process, so the requests the server received are
counted here, not read back from the store under test. The one side effect is a line per refund body in
``writes.log``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import durable_cases as cases
from tests.support.durable_clusters import RestateCluster, restate_cluster, stop
from tests.support.restate_server import RestateServer, http, restate_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
BODIES = {  # the refund tool's body -> the kill points it reaches
    "refund": [p for p in cases.KILL_POINTS if p != "in-step"],  # a plain body: in-step is in-tool
    # the write inside ctx.run("charge", ...): the points after the tool began (those before are the plain body's)
    "journaled": ["before-model-2", "reserved", "in-step", "in-tool", "in-verify", "after-outcome"],
}
ENDS = {**cases.ENDS, "after-outcome": ("completed", "validated_done")}
"""``after-outcome``: the task's outcome stored, the handler killed before Restate recorded its return."""
ROUNDS = int(os.environ.get("LG_RESTATE_ROUNDS", "1"))
"""Rounds per (body, kill point): each one a handler process killed and its successor started."""


@pytest.fixture(scope="module")
def restate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestateServer]:
    with restate_server(tmp_path_factory.mktemp("restate")) as server:
        yield server


@pytest.fixture
def cluster(restate: RestateServer, tmp_path: Path) -> Iterator[RestateCluster]:
    with restate_cluster(restate, f"sqlite:///{tmp_path / 'loopguard.sqlite'}", tmp_path) as cluster:
        yield cluster


def test_r17_killed_restate_handlers_run_every_write_once_with_exact_counters(cluster: RestateCluster) -> None:
    """Rules: R17 (durable replays count once), R6 (unknown blocks a resend), R1 (reserved before the call).

    Every kill point of a refund run (tests/support/durable_cases.py), for a plain tool body and for a body that
    journals its write itself (``ctx.run``), and for that one also once the task's outcome was stored. Each round's
    handler process is SIGKILLed at its point; restate-server retries the invocation against the next process, which
    replays the journal and runs the rest. Every invocation ends (none stuck on a journal mismatch) with the outcome
    its kill point leads to; every refund body ran once;
    each task's model turns equal the requests the scripted server received for its order, plus the one turn
    reserved whose request never left (kill point ``reserved``: R1 reserves before the call). Half the rounds
    resolve the model by name through the application's provider, half hold a Model instance on the agent."""
    rounds = []
    plan = [(body, point) for body, points in BODIES.items() for point in points for _ in range(ROUNDS)]
    for index, (body, point) in enumerate(plan):
        order = 1000 + index + int(uuid.uuid4().int % 10**6) * 100
        tag = uuid.uuid4().hex[:10]
        rounds.append({"order": order, "kill": point, "tag": tag, "work": body, "by_name": index % 2 == 1})
    results = cluster.killed_then_retried(rounds)
    requests, writes = cluster.requests_by_order(), cluster.writes()
    store = cluster.store()
    try:
        for request in rounds:
            point, order, result = request["kill"], request["order"], results[request["tag"]]
            seen = (request["work"], point)
            task_id = result["invocation"]
            trace = [(e.kind, e.tool, e.result_class) for e in store.trace(task_id)]
            assert writes[f"refund-{order}"] == 1, (seen, writes[f"refund-{order}"], trace)
            assert (result["status"], result["reason"]) == ENDS[point], (seen, result, trace, requests[order])
            task = store.task(task_id)
            assert task is not None and task.used.models == result["models"], (seen, trace)
            assert task.used.models == requests[order] + cases.UNSENT.get(point, 0), (seen, requests[order], trace)
            assert task.used.tools == 1, (seen, task.used)
            assert result["pid"] == result["successor"], "the retried invocation ran in the successor"
    finally:
        store.close()
    assert sum(writes.values()) == len(rounds)


def test_r17_a_refusal_inside_the_journaled_call_is_terminal_and_the_run_ends_with_its_outcome(
    cluster: RestateCluster,
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
        stop(handler)
    rounds = [{"order": orders[p], "kill": p, "tag": uuid.uuid4().hex[:10], **common} for p in orders if p != "plain"]
    results = cluster.killed_then_retried(rounds)
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


def test_a_cancelled_restate_invocation_whose_body_waits_outside_restate_lets_the_body_finish(
    cluster: RestateCluster,
) -> None:
    """Issue 32 item 3: Restate's cancellation of an invocation while a tool body runs. The body waits without
    Restate, which cannot interrupt it: it finishes, and Restate's cancellation (cooperative, seen at a journaled step
    that is still pending) may come too late to stop the run. The task's model turns are the requests the server
    received, and the refund ran once. (A body waiting on a journaled sleep, which the cancellation stops: the kit's
    row ``restate:cancelled-tool``.)"""
    order = 6000 + int(uuid.uuid4().int % 10**5)
    handler = cluster.listening(cluster.handler())
    try:
        invocation = cluster.invoke(order=order, tag=uuid.uuid4().hex[:10], work="slow-plain")
        deadline = time.monotonic() + 60
        while not (cluster.folder / f"body-started-{order}").exists():
            assert time.monotonic() < deadline, "the tool body never started"
            time.sleep(0.02)
        cluster.server.cancel(invocation)
        status, answer = http("GET", f"{cluster.server.ingress}/restate/invocation/{invocation}/attach", timeout=120)
    finally:
        stop(handler)
    store = cluster.store()
    try:
        task = store.task(invocation)
    finally:
        store.close()
    assert task is not None and task.outcome is not None, (status, answer)
    assert task.used.models == cluster.requests_by_order()[order], (task.used, answer)
    assert cluster.writes()[f"refund-{order}"] == 1
    assert (cluster.folder / f"body-ended-{order}").exists()
    assert (task.status, task.outcome["reason"]) in {("completed", "validated_done"), ("stopped", "cancelled")}


def test_the_restate_example_serves_registers_and_invokes_its_guarded_handler(tmp_path: Path) -> None:
    """examples/restate_refund.py (docs/durable.md) runs every step a user takes: the handler served by hypercorn,
    registered with a restate-server it starts, invoked, the task read back as an Outcome; one charge ran."""
    from tests.support.restate_server import server_binary

    env = {**os.environ, "RESTATE_SERVER": str(server_binary()), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "restate_refund.py")],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the handler answered: completed/validated_done" in done.stdout
    assert "the task in the store: completed/validated_done, model turns 2" in done.stdout
    assert "charges run: 1" in done.stdout
