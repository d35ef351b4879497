"""R17, R20 on a real DBOS (on our PostgreSQL): a worker SIGKILLed around a refund whose tool has a probe; DBOS
recovers the workflow in another process, the guard finds the refund ``unknown`` (reserved by the dead attempt) and
asks the receiver. Each round ends as the receiver says: ``completed`` with exactly one refund (the receiver has it:
its stored answer; it never got it, before the write or in a transaction the kill rolled back: one new attempt), or
``needs_reconciliation`` when the probe cannot say. The refunds are counted in the receiver itself (the log the body
appends to, the rows a transaction committed), the bodies' attempts in the store's ledger.

Workers are real OS processes (tests/workers/dbos_worker.py), the model the real ``openai`` client against the
scripted server in this process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard.store import SQLStore
from tests.support.durable_clusters import DBOSCluster, RestateCluster, dbos_cluster, restate_cluster
from tests.support.restate_server import restate_server

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(400)]

ROUNDS = {  # (tool body, kill point) -> (status, reason, refunds, ledger attempts, tool executions, probe answer)
    ("probed", "before-write"): ("completed", "validated_done", 1, 2, 3, "not_committed"),
    ("probed", "in-tool"): ("completed", "validated_done", 1, 1, 2, "committed"),
    ("probed", "in-verify"): ("completed", "validated_done", 1, 1, 2, "committed"),
    ("probed-transaction", "in-step"): ("completed", "validated_done", 1, 2, 3, "not_committed"),
    ("probed-transaction", "in-verify"): ("completed", "validated_done", 1, 1, 2, "committed"),
    ("probed-unknown", "in-tool"): ("needs_reconciliation", "unknown_commit", 1, 1, 3, None),
}
"""A transaction killed before its commit wrote nothing (the kill rolled it back): the receiver never got it."""


@pytest.fixture
def cluster(postgres_url: str, pg_schema_url: str, tmp_path: Path) -> Iterator[DBOSCluster]:
    with dbos_cluster(postgres_url, pg_schema_url, tmp_path) as cluster:
        yield cluster


def _order() -> int:
    return 5000 + int(uuid.uuid4().int % 10**6) * 100


def test_r20_killed_dbos_workers_end_as_the_receiver_says(cluster: DBOSCluster) -> None:
    plan = {f"wf-{uuid.uuid4().hex[:10]}": (body, point, _order()) for body, point in ROUNDS}
    cluster.kill_rounds(plan, transactions={"probed-transaction"})
    recovery = cluster.start(
        "recover",
        workflow_ids=list(plan),
        executors=[f"ex-{w}" for w in plan],
        executor=f"ex-{uuid.uuid4().hex[:8]}",
        datasource=True,
    )
    out, err = recovery.communicate(timeout=300)
    assert recovery.returncode == 0, err[-3000:]
    results = {row["workflow_id"]: row for row in (json.loads(line) for line in out.splitlines() if line[:1] == "{")}
    writes = cluster.writes()
    store = SQLStore(cluster.store_url)
    try:
        for workflow_id, (body, point, order) in plan.items():
            status, reason, refunds, attempts, tools, answer = ROUNDS[(body, point)]
            task_id, seen = f"task-{workflow_id}", (body, point)
            result: dict[str, Any] = results[workflow_id]
            trace = [(e.kind, e.result_class) for e in store.trace(task_id)]
            assert (result.get("status"), result.get("reason")) == (status, reason), (seen, result, trace)
            assert writes[f"refund-{order}"] == refunds, (seen, writes[f"refund-{order}"], trace)
            (op,) = store.operations(task_id)
            assert op.attempts == attempts, (seen, op, trace)
            assert str(op.state) == ("committed" if answer else "unknown"), (seen, op)
            task = store.task(task_id)
            assert task is not None and task.used.tools == tools, (seen, task.used, trace)
            probed = [(t.kind, t.who) for t in store.transitions(task_id)]
            assert probed == ([("reconcile", "probe:refund")] if answer else []), (seen, probed)
            asked = [e.result_class for e in store.trace(task_id) if e.kind == "probe"]
            expected = [f"probe_{answer}"] if answer else ["probe_unknown", "probe_unknown", "probe_refused"]
            assert asked == expected, (seen, trace)
            assert result["pid"] == recovery.pid, "the recovering process finished the workflow"
    finally:
        store.close()


RESTATE_ROUNDS = {  # kill point -> (status, reason, ledger attempts, tool executions, probe answer)
    "before-write": ("completed", "validated_done", 2, 3, "not_committed"),
    "in-tool": ("completed", "validated_done", 1, 2, "committed"),
    "in-verify": ("completed", "validated_done", 1, 2, "committed"),
}


@pytest.fixture
def restate_refunds(tmp_path: Path) -> Iterator[RestateCluster]:
    (tmp_path / "restate").mkdir()
    with (
        restate_server(tmp_path / "restate") as server,
        restate_cluster(server, f"sqlite:///{tmp_path / 'loopguard.sqlite'}", tmp_path) as cluster,
    ):
        yield cluster


def test_r20_killed_restate_handlers_end_as_the_receiver_says(restate_refunds: RestateCluster) -> None:
    """The same on a real restate-server: each round's handler process is SIGKILLed at its point, restate-server
    retries the invocation against the next process, whose guard asks the receiver about the refund left unknown."""
    rounds = [
        {"order": _order(), "kill": point, "tag": uuid.uuid4().hex[:10], "work": "probed", "by_name": False}
        for point in RESTATE_ROUNDS
    ]
    results = restate_refunds.killed_then_retried(rounds)
    writes = restate_refunds.writes()
    store = restate_refunds.store()
    try:
        for request in rounds:
            point, order, result = request["kill"], request["order"], results[request["tag"]]
            status, reason, attempts, tools, answer = RESTATE_ROUNDS[point]
            task_id = result["invocation"]
            trace = [(e.kind, e.result_class) for e in store.trace(task_id)]
            assert (result["status"], result["reason"]) == (status, reason), (point, result, trace)
            assert writes[f"refund-{order}"] == 1, (point, writes[f"refund-{order}"], trace)
            (op,) = store.operations(task_id)
            assert (str(op.state), op.attempts) == ("committed", attempts), (point, op, trace)
            task = store.task(task_id)
            assert task is not None and task.used.tools == tools, (point, task.used, trace)
            assert [(t.kind, t.who) for t in store.transitions(task_id)] == [("reconcile", "probe:refund")]
            assert [e.result_class for e in store.trace(task_id) if e.kind == "probe"] == [f"probe_{answer}"], trace
            assert result["pid"] == result["successor"], "the retried invocation ran in the successor"
    finally:
        store.close()
