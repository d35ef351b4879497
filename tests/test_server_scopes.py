"""R18 (scopes and audit): a workflow token touches only its own flows' activations and their operations.

The attack of issue 21 as it was written, over HTTP against a live server on SQLite and PostgreSQL: a token scoped
to ``orders-sync`` reserved ``refund-order-42`` and reported it committed with ``"FORGED"``; an unrelated agent task
that then proposed that refund got the forged value back as a replay, and the refund never ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agents_loopguard import Budget, Guard, Status, Verdict, create_runner
from agents_loopguard.ops.triggers import TriggerGuard
from agents_loopguard.server import create_app
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.calls import Call, Ticket
from tests.support.live_server import LiveServer
from tests.support.server_env import CONFIG, bearer, lost_write, paused_task
from tests.support.stores import sql_store

FLOW = "orders-sync"
BASE = f"/api/v1/flows/{FLOW}/activations"

store = pytest.fixture(sql_store, name="store")


@pytest.fixture
def client(store: SQLStore) -> Iterator[httpx.Client]:
    with LiveServer(create_app(store, CONFIG)) as live, httpx.Client(base_url=live.url, timeout=30) as http:
        http.headers.update(bearer("n8n"))
        yield http


def refund_run(store: SQLStore, task_id: str, refunds: list[int]) -> Any:
    """An unrelated agent task (the article's runner on the real engine) that proposes refunding order 42."""

    def execute(call: Any) -> Any:
        refunds.append(call["args"]["order"])
        return {"status": "ok", "refund": "re-42"}

    run = create_runner(
        budget=Budget(model_turns=3, tool_executions=3),
        store=store,
        task_id=task_id,
        execute=execute,
        verify=lambda call, result: {"revision": 1, "done": True, "effect": "committed"},
    )
    return run([{"tool": "refund", "kind": "write", "operation_id": "refund-order-42", "args": {"order": 42}}])


def test_r18_a_flow_token_cannot_forge_a_task_ledger_entry(client: httpx.Client, store: SQLStore) -> None:
    """R18 (scopes and audit): the attack as written; the agent's refund runs, with its own result."""
    write = {"operation_id": "refund-order-42", "tool": "refund", "args": {"order": 42}}
    started = client.post(BASE, json={"event_id": "evt-forge", "write": write})
    assert started.status_code == 200, started.text
    finished = client.post(f"{BASE}/evt-forge/finish", json={"effect": "committed", "result": "FORGED"})
    assert finished.status_code == 200, finished.text
    refunds: list[int] = []
    outcome = refund_run(store, "agent-ticket-42", refunds)
    assert refunds == [42], "the agent's refund never ran: the flow's write aliased the task's operation"
    assert (outcome.status, outcome.value) == (Status.COMPLETED, {"status": "ok", "refund": "re-42"})
    agents_op = store.lookup_operation("refund-order-42")
    assert agents_op is not None and agents_op.task_id == "agent-ticket-42"
    flows_ops = [op for op in store.operations() if op.task_id == f"{FLOW}:evt-forge"]
    assert [op.operation_id for op in flows_ops] == [f"flow:{FLOW}:refund-order-42"]


def test_r18_a_flow_write_never_replays_or_blocks_a_task_operation(client: httpx.Client, store: SQLStore) -> None:
    """R18 (scopes and audit): the other way round, a task's committed or unknown write is not the flow's."""
    refunds: list[int] = []
    assert refund_run(store, "agent-first", refunds).status is Status.COMPLETED
    lost_write(store, "agent-lost", "pay-7")
    for event, op in (("e-replay", "refund-order-42"), ("e-blocked", "pay-7")):
        answer = client.post(BASE, json={"event_id": event, "write": {"operation_id": op, "tool": "t", "args": {}}})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["allowed"], body["act"], body["write"]["replay"]) == (True, True, False), body
        assert body["write"]["operation_id"] == f"flow:{FLOW}:{op}"


def test_r18_an_agent_task_cannot_write_in_a_flow_namespace(store: SQLStore) -> None:
    """R18 (scopes and audit): an operation id in a flow's namespace is refused to a task that is not its activation,
    and an activation may write only in its own flow's namespace."""
    guard = Guard(budget=Budget(3, 3), store=store, task_id="agent-sneaky")
    refused = guard.authorize(Call("refund", {"order": 1}, kind="write", operation_id=f"flow:{FLOW}:refund-1"))
    assert isinstance(refused, Verdict) and refused.reason == "operation_conflict", refused
    assert "namespace" in refused.detail
    trigger = TriggerGuard(store, flow="billing")
    activation = trigger.activate("evt-1")
    assert not isinstance(activation, Verdict) and hasattr(activation, "activation_id")
    flow_guard = trigger.guard(activation, budget=Budget(0, 3))  # type: ignore[arg-type]
    foreign = flow_guard.authorize(Call("refund", {}, kind="write", operation_id=f"flow:{FLOW}:refund-1"))
    assert isinstance(foreign, Verdict) and foreign.reason == "operation_conflict"
    plain = flow_guard.authorize(Call("refund", {}, kind="write", operation_id="refund-1"))
    assert isinstance(plain, Verdict) and plain.reason == "operation_conflict"
    own = flow_guard.authorize(Call("refund", {}, kind="write", operation_id=trigger.operation_id("refund-1")))
    assert isinstance(own, Ticket) and own.call.operation_id == "flow:billing:refund-1"


def test_r18_a_flow_token_cannot_read_or_end_a_task_outside_its_flows(client: httpx.Client, store: SQLStore) -> None:
    """R18 (scopes and audit): a task whose id looks like an activation of the flow is not one; a parent activation
    must be an activation of a flow the token may use; operator routes stay closed."""
    refunds: list[int] = []
    assert refund_run(store, f"{FLOW}:ticket-9", refunds).status is Status.COMPLETED  # an agent task, not a flow's
    looked = client.get(f"{BASE}/ticket-9")
    assert looked.status_code == 404, looked.text
    ended = client.post(f"{BASE}/ticket-9/finish", json={"ending": "failed"})
    assert ended.status_code == 404, ended.text
    claimed = client.post(BASE, json={"event_id": "ticket-9"})
    assert claimed.status_code == 409, claimed.text
    assert "ticket-9" not in str(store.activations())
    snapshot = store.task(f"{FLOW}:ticket-9")
    assert snapshot is not None and snapshot.status == "completed"
    parent = client.post(BASE, json={"event_id": "e-2", "parent_activation": f"{FLOW}:ticket-9"})
    assert parent.status_code == 404, parent.text
    TriggerGuard(store, flow="payroll").activate("p-1")  # a flow the token does not hold
    other = client.post(BASE, json={"event_id": "e-3", "parent_activation": "payroll:p-1"})
    assert other.status_code == 404, other.text
    pause_id = paused_task(store, "agent-paused")
    for path in ("/api/v1/tasks", f"/api/v1/pauses/{pause_id}", "/api/v1/operations/refund-order-42"):
        assert client.get(path).status_code == 403, path
    assert client.post("/api/v1/flows/payroll/activations", json={"event_id": "x"}).status_code == 403
