"""R17 on a real DBOS (dbos 3.4 + dbos-openai-agents 0.3) on our PostgreSQL: an Agents SDK agent in a
``@DBOS.workflow``, guarded by ``run_guarded_dbos``, SIGKILLed at every kill point and recovered by DBOS in another
process, with a plain tool body, a ``@DBOS.step`` body and a datasource transaction body; then DBOS queue workers
sharing one task budget. (A fork of a finished task: the kit's row ``dbos:fork``, tests/conformance.)

Every worker is a real OS process (tests/workers/dbos_worker.py); the model is the real ``openai`` client over HTTP
against the scripted server in this process, so the requests the server received are counted here, not read back
from the store under test. The side effect is a refund per body run (tests/support/durable_cases.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget
from agents_loopguard.store import SQLStore
from tests.support import durable_cases as cases
from tests.support.durable_clusters import DBOSCluster, dbos_cluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(400)]

AFTER_TOOL = ["before-model-2", "reserved", "in-step", "in-verify"]
"""The kill points where a body's own step is replayed (the points before the tool are the same for every body)."""
BODIES = {  # the refund tool's body -> the kill points it is killed at
    "refund": [p for p in cases.KILL_POINTS if p != "in-step"],  # a plain body: in-step is in-tool
    "step": AFTER_TOOL,  # the tool's function is the step
    "transaction": [p for p in AFTER_TOOL if p != "reserved"],
}
BODIES = {body: BODIES[body] for body in os.environ.get("LG_DBOS_BODIES", ",".join(BODIES)).split(",")}
"""``LG_DBOS_BODIES`` narrows them (CI's oldest-SDK run: ``step``)."""
ROUNDS = int(os.environ.get("LG_DBOS_ROUNDS", "1"))
"""Rounds per (body, kill point): 13 in all, every kill point of every body covered."""


@pytest.fixture
def cluster(postgres_url: str, pg_schema_url: str, tmp_path: Path) -> Iterator[DBOSCluster]:
    with dbos_cluster(postgres_url, pg_schema_url, tmp_path) as cluster:
        yield cluster


def _finished(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def _results(out: str) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {row["workflow_id"]: row for row in rows}


def _new_order(index: int) -> int:
    return 1000 + index + int(uuid.uuid4().int % 10**6) * 100


def test_r17_killed_workers_recovered_by_dbos_run_every_write_once_with_exact_counters(cluster: DBOSCluster) -> None:
    """Rules: R17 (durable replays count once), R6 (unknown blocks a resend), R1 (reserved before the call).

    Every kill point of a refund run (tests/support/durable_cases.py), for each tool body: a plain function, a
    ``@DBOS.step`` as the tool's function, a datasource transaction. Each workflow's worker (a DBOS executor of its
    own) is SIGKILLed at its point; another process then recovers the dead executors' workflows, as DBOS does for a
    dead executor. Every workflow completes with the outcome its kill point leads to; every refund was written at
    most once (a transaction killed before its commit wrote nothing); each task's model turns equal the requests
    the server received for its order, plus the one turn reserved whose request never left (kill point
    ``reserved``: R1 reserves before the call)."""
    plan: dict[str, tuple[str, str, int]] = {}
    rounds = [(body, point) for body, points in BODIES.items() for point in points for _ in range(ROUNDS)]
    for index, (body, point) in enumerate(rounds):
        plan[f"wf-{uuid.uuid4().hex[:10]}"] = (body, point, _new_order(index))
    cluster.kill_rounds(plan, transactions={"transaction"})
    recovery = cluster.start(
        "recover",
        workflow_ids=list(plan),
        executors=[f"ex-{w}" for w in plan],
        executor=f"ex-{uuid.uuid4().hex[:8]}",
        datasource="transaction" in BODIES,
    )
    code, out, err = _finished(recovery, timeout=300)
    results = _results(out)
    assert code == 0, err[-3000:]
    failed = {plan[w][:2]: r["error"][:300] for w, r in results.items() if "error" in r}
    assert not failed, failed
    requests, writes = cluster.requests_by_order(), cluster.writes()
    store = SQLStore(cluster.store_url)
    try:
        for workflow_id, (body, point, order) in plan.items():
            seen = (body, point)
            result = results[workflow_id]
            trace = [(e.kind, e.tool, e.result_class) for e in store.trace(f"task-{workflow_id}")]
            expected_writes = 0 if (body, point) == ("transaction", "in-step") else 1
            assert writes[f"refund-{order}"] == expected_writes, (seen, writes[f"refund-{order}"], trace)
            assert (result["status"], result["reason"]) == cases.ENDS[point], (seen, result, trace)
            task = store.task(f"task-{workflow_id}")
            assert task is not None and task.used.models == result["models"], (seen, task, result)
            assert task.used.models == requests[order] + cases.UNSENT.get(point, 0), (seen, requests[order], trace)
            assert task.used.tools == 1, (seen, task.used)
            assert result["pid"] == recovery.pid, "the recovering process finished the workflow"
    finally:
        store.close()


def test_r16_r17_dbos_queue_workers_share_one_task_budget_exactly(cluster: DBOSCluster) -> None:
    """Rules: R16 (many workers share a task), R17, R2 (the model budget).

    Three DBOS worker processes pull six workflows of one task from a DBOS queue, concurrently. The task's budget
    (10 model turns) is less than the work (13 turns each): the turns reserved equal the requests the server received,
    and never exceed the budget. A second task's stop mark, set before its workflows are enqueued, lets none of
    them send a request."""
    from dbos import DBOSClient

    executors = [f"ex-q{n}-{uuid.uuid4().hex[:6]}" for n in range(3)]
    workers = [cluster.start("queue", executor=e, model_turns=10, tool_executions=40) for e in executors]
    deadline = time.monotonic() + 120
    while not all((cluster.folder / f"ready-{e}").exists() for e in executors):  # every worker listens first
        assert time.monotonic() < deadline and all(w.poll() is None for w in workers), "a queue worker did not start"
        time.sleep(0.1)
    client = DBOSClient(system_database_url=cluster.system_url, dbos_system_schema=cluster.system_schema)
    store = SQLStore(cluster.store_url)
    try:
        store.ensure_task("stopped-task", Budget(model_turns=50, tool_executions=50))
        store.request_stop("stopped-task", "the operator stopped it")
        options = {"queue_name": "refunds", "workflow_name": "refund_flow", "app_version": "loopguard-test-1"}
        shared = [client.enqueue(options, "shared-task", 7000 + n, "lookup") for n in range(6)]  # type: ignore[arg-type]
        stopped = [client.enqueue(options, "stopped-task", 8000 + n, "lookup") for n in range(3)]  # type: ignore[arg-type]
        results = [handle.get_result() for handle in shared + stopped]
    finally:
        (cluster.folder / "stop").write_text("")
        for process in workers:
            code, _, err = _finished(process)
            assert code == 0, err[-2000:]
        client.destroy()
    requests = cluster.requests_by_order()
    task = store.task("shared-task")
    store.close()
    assert task is not None
    shared_requests = sum(requests[7000 + n] for n in range(6))
    assert task.used.models == shared_requests == 10, (task.used, shared_requests, results)
    assert len({result["pid"] for result in results[:6]}) > 1, "the queue spread the workflows over the workers"
    assert sum(requests[8000 + n] for n in range(3)) == 0
    assert all(result["reason"] == "stop_requested" for result in results[6:]), results[6:]


@pytest.mark.parametrize("kill", ["", "in-verify"], ids=["resumed", "killed-in-the-resumed-write"])
def test_r13_r17_an_approval_pause_in_a_dbos_workflow_is_stored_with_the_budget_and_resumed_once(
    cluster: DBOSCluster, kill: str
) -> None:
    """Rules: R13 (a pause keeps the budget, resumed once), R17, R6.

    A workflow's refund needs approval: the run pauses (needs_human), its pause stored with the task's budget. An
    operator approves; a second workflow in another process resumes it with ``resume_guarded_dbos`` (the claim is a
    DBOS step). Killed inside the approved write, its recovery replays the claim (never claiming twice) and ends
    needs_reconciliation without a second write; not killed, it completes with the model turns continuing. A second
    resume of the same pause is refused."""
    from agents_loopguard.ops.approvals import decide

    order, task = 9000 + int(uuid.uuid4().int % 10**5), f"task-{uuid.uuid4().hex[:8]}"
    first = cluster.start(
        "start", workflow_id=f"wf-{task}", task_id=task, order=order, work="approve", executor=f"ex-{task}"
    )
    code, out, err = _finished(first)
    assert code == 0, err[-2000:]
    paused = _results(out)[f"wf-{task}"]
    assert (paused["status"], paused["reason"], paused["models"]) == ("needs_human", "approval", 1)
    assert cluster.writes()[f"refund-{order}"] == 0
    store = SQLStore(cluster.store_url)
    try:
        decide(store, paused["pause_id"], who="lead", approve_all=True)
        resume_id = f"wf-resume-{task}"
        resume = cluster.start(
            "start",
            workflow_id=resume_id,
            pause_id=paused["pause_id"],
            order=order,
            kill=kill,
            executor=f"ex-{resume_id}",
        )
        code, out, err = _finished(resume)
        if kill:
            assert code == -9, err[-2000:]
            recovery = cluster.start(
                "recover", workflow_ids=[resume_id], executors=[f"ex-{resume_id}"], executor=f"ex-r-{task}"
            )
            code, out, err = _finished(recovery)
        assert code == 0, err[-3000:]
        resumed = _results(out)[resume_id]
        expected = ("needs_reconciliation", "unknown_commit") if kill else ("completed", "validated_done")
        assert (resumed["status"], resumed["reason"]) == expected, resumed
        assert cluster.writes()[f"refund-{order}"] == 1
        assert resumed["models"] == cluster.requests_by_order()[order] == (1 if kill else 2)
        assert [t.kind for t in store.transitions(task)] == ["resume"]  # claimed once, the replay included
        again = cluster.start(
            "start",
            workflow_id=f"wf-again-{task}",
            pause_id=paused["pause_id"],
            order=order,
            executor=f"ex-again-{task}",
        )
        code, _, err = _finished(again)
        assert code != 0 and "PauseAlreadyResumed" in err, err[-2000:]
        assert cluster.writes()[f"refund-{order}"] == 1
    finally:
        store.close()
