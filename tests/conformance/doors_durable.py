"""The durable engines' doors that failed before issue 32 / issue 26 item 4: DBOS (a ``@DBOS.step`` or a datasource
transaction as a tool's body, recovered after a kill; a fork of a finished task) and Restate (a tool body that
journals its write with ``ctx.run``, recovered after a kill; a cancellation inside a tool body; a Virtual Object
keyed by its task). Temporal's doors are tested in tests/test_durable_temporal.py: its integration needs the
oldest supported openai-agents, which only CI's oldest-SDK venv holds (docs/doors.md names those tests).

Every row runs real OS processes (tests/workers/dbos_worker.py, tests/workers/restate_worker.py) against the real
engine, with the env's task and store (so never the memory store), and counts the refunds written, the bodies that
ran and the requests the scripted model server received. No ``stop`` variant: the bodies run in other processes,
where the kit's checkpoint cannot set the mark between two of them (the stop mark under a durable engine is tested
by tests/test_durable_dbos.py's queue workers).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from typing import Any

from agents_loopguard import Reason, Status
from tests.conformance.kit import Door, Env, Observed
from tests.support.durable_clusters import dbos_cluster, restate_cluster, shared_restate_server, stop
from tests.support.restate_server import http

__all__ = ["DOORS"]


def _order() -> int:
    return 10_000 + int(uuid.uuid4().int % 10**6) * 10


def _budget(env: Env) -> dict[str, int]:
    return {"model_turns": env.budget.model_turns, "tool_executions": env.budget.tool_executions}


def _observed(env: Env, order: int, writes: Counter[str], requests: Counter[int], **more: Any) -> Observed:
    """What a row of refunds saw: the task's stored outcome, the refund bodies that ran (each one a write), the
    writes at the receiver and the requests the model received for the row's order."""
    task = env.store.task(env.task_id)
    outcome = task.stored_outcome() if task is not None else None
    refunds = writes[f"refund-{order}"]
    bodies = Counter({"refund": refunds}) if refunds else Counter()
    return Observed(outcome, bodies, Counter({f"refund-{order}": refunds}), requests[order], **more)


# --- DBOS ---------------------------------------------------------------------------------------------------------


def _postgres() -> str:
    url = os.environ.get("LOOPGUARD_TEST_POSTGRES_URL")
    assert url, "the DBOS rows run on PostgreSQL (LOOPGUARD_TEST_POSTGRES_URL)"
    return url


def dbos_recovered(body: str) -> Any:
    """A refund whose tool body is ``body``; the worker SIGKILLed after the tool ended (before the second model turn
    is reserved), the workflow recovered by DBOS in another process, which meets the body's recorded step."""

    def build(env: Env) -> Observed:
        assert env.store_url is not None
        order, workflow = _order(), f"wf-{uuid.uuid4().hex[:10]}"
        with dbos_cluster(_postgres(), env.store_url, env.tmp_path, shared=True) as cluster:
            common = {"workflow_id": workflow, "task_id": env.task_id, "order": order, "work": body, **_budget(env)}
            datasource = body == "transaction"
            cluster.run(
                "start", killed=True, kill="before-model-2", executor=f"ex-{workflow}", datasource=datasource, **common
            )
            recovered = {"workflow_ids": [workflow], "executors": [f"ex-{workflow}"], "datasource": datasource}
            results = cluster.run("recover", executor=f"ex-r-{workflow}", **recovered)
            assert "error" not in results[workflow], results[workflow]
            return _observed(env, order, cluster.writes(), cluster.requests_by_order())

    return build


def dbos_fork(env: Env) -> Observed:
    """R2, R19: a workflow whose task defaults to its id (the env's task) looks an order up until its budget of
    model turns stops it; then ``DBOS.fork_workflow`` from its first model step: the fork continues the parent's
    task, which had ended, so it runs nothing and returns the stored outcome marked as a replay (before: the fork
    ran under a fresh task with a fresh budget). The kit checks that no task of the fork's own exists and that the
    requests the server received are the parent's turns."""
    assert env.store_url is not None
    order = _order()
    with dbos_cluster(_postgres(), env.store_url, env.tmp_path, pace=0, shared=True) as cluster:
        first = {"workflow_id": env.task_id, "order": order, "work": "lookup", **_budget(env)}
        parent = cluster.run("start", executor=f"ex-{env.task_id}", **first)[env.task_id]
        assert (parent["status"], parent["task_id"], parent["replay"]) == ("stopped", env.task_id, False), parent
        forked = cluster.run("fork", workflow_id=env.task_id, start_step=1, executor=f"ex-fork-{env.task_id}")
        [(fork_id, result)] = forked.items()
        assert fork_id != env.task_id and result["replay"], result
        assert (result["status"], result["reason"], result["task_id"]) == ("stopped", parent["reason"], env.task_id)
        return _observed(env, order, cluster.writes(), cluster.requests_by_order())


# --- Restate ------------------------------------------------------------------------------------------------------


def restate_recovered(env: Env) -> Observed:
    """A refund whose tool body journals its write (``ctx.run``); the handler SIGKILLed after the tool ended, the
    invocation retried by restate-server against the next handler, which meets the journaled ``charge``."""
    assert env.store_url is not None
    order = _order()
    with restate_cluster(shared_restate_server(), env.store_url, env.tmp_path) as cluster:
        request = {"order": order, "kill": "before-model-2", "tag": uuid.uuid4().hex[:10], "work": "journaled"}
        cluster.killed_then_retried([{**request, "task_id": env.task_id, **_budget(env)}])
        return _observed(env, order, cluster.writes(), cluster.requests_by_order())


def restate_cancelled(env: Env) -> Observed:
    """Issue 32 item 3: a refund whose body, after its write, waits on a journaled sleep; the invocation is cancelled
    meanwhile: the body stops there (before: the guard took Restate's cancellation for the body's failure, told the
    model so and went on), the write stays in flight (unknown, never sent again), no request leaves after it, and
    Restate reports the invocation cancelled. (A body that waits without Restate: tests/test_durable_restate.py.)"""
    assert env.store_url is not None
    order = _order()
    with restate_cluster(shared_restate_server(), env.store_url, env.tmp_path) as cluster:
        handler = cluster.listening(cluster.handler())
        try:
            tag = uuid.uuid4().hex[:10]
            invocation = cluster.invoke(order=order, tag=tag, work="slow", task_id=env.task_id, **_budget(env))
            deadline = time.monotonic() + 60
            while not (env.tmp_path / f"body-started-{order}").exists():
                assert time.monotonic() < deadline, "the tool body never started"
                time.sleep(0.02)
            cluster.server.cancel(invocation)
            status, answer = http(
                "GET", f"{cluster.server.ingress}/restate/invocation/{invocation}/attach", timeout=120
            )
        finally:
            stop(handler)
        assert (status, answer["message"]) == (409, "cancelled"), answer
        seen = _observed(env, order, cluster.writes(), cluster.requests_by_order())
        assert seen.outcome is not None and (seen.outcome.status, seen.outcome.reason) == (
            Status.NEEDS_RECONCILIATION,
            Reason.CANCELLED,
        ), seen.outcome  # before: the cancellation was the tool's failure, told to the model, and the run went on
        operations = {op.operation_id: str(op.state) for op in env.store.operations(env.task_id)}
        assert operations == {f"refund-{order}": "unknown"}, operations
        assert seen.requests == 1 and not (env.tmp_path / f"body-ended-{order}").exists()
        return seen


def restate_virtual_object(env: Env) -> Observed:
    """Issue 32 item 3: a Virtual Object keyed by the task: a first request refunds its order and ends the task; a
    second, different request on the same key runs nothing and gets the task's stored outcome, marked as a replay
    (``Outcome.result`` a ``Replay``), where it used to look like an answer to its own request."""
    assert env.store_url is not None
    order, other = _order(), _order() + 1
    with restate_cluster(shared_restate_server(), env.store_url, env.tmp_path) as cluster:
        handler = cluster.listening(cluster.handler())
        try:
            answers = [
                cluster.server.result(
                    cluster.invoke(key=env.task_id, order=asked, tag=uuid.uuid4().hex[:10], **_budget(env))
                )
                for asked in (order, other)
            ]
        finally:
            stop(handler)
        replays = [(a["status"], a["task_id"], a["replay"]) for a in answers]
        assert replays == [("completed", env.task_id, False), ("completed", env.task_id, True)], answers
        requests = cluster.requests_by_order()
        assert (requests[order], requests[other], cluster.writes()[f"refund-{other}"]) == (2, 0, 0), requests
        seen = _observed(env, order, cluster.writes(), requests)
        seen.requests = (seen.requests or 0) + requests[other]
        return seen


DOORS = [
    Door(
        "dbos",
        "step-tool",
        "a `@DBOS.step` as the tool's function, recovered after a crash",
        dbos_recovered("step"),
        stores=("postgres",),
        stop_at=None,
    ),
    Door(
        "dbos",
        "transaction-tool",
        "a datasource transaction as the tool's function, recovered after a crash",
        dbos_recovered("transaction"),
        stores=("postgres",),
        stop_at=None,
    ),
    Door(
        "dbos",
        "fork",
        "`DBOS.fork_workflow` of a workflow whose task ended",
        dbos_fork,
        stores=("postgres",),
        stop_at=None,
    ),
    Door(
        "restate",
        "journaled-tool",
        "a tool body that journals its write (`ctx.run`), the invocation retried after a crash",
        restate_recovered,
        stores=("sqlite",),
        stop_at=None,
    ),
    Door(
        "restate",
        "cancelled-tool",
        "the invocation cancelled while a tool body waits on a journaled step",
        restate_cancelled,
        stores=("sqlite",),
        stop_at=None,
    ),
    Door(
        "restate",
        "virtual-object",
        "a Virtual Object keyed by the task, given a second request",
        restate_virtual_object,
        stores=("sqlite",),
        stop_at=None,
    ),
]
