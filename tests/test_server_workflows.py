"""Trigger activations over HTTP: the same decisions and the same store rows as TriggerGuard called from Python."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agents_loopguard import Budget, Outcome, Verdict
from agents_loopguard.ops.triggers import TriggerGuard
from agents_loopguard.server import create_app
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.calls import Call, Ticket
from tests.support.live_server import LiveServer
from tests.support.server_env import CONFIG, bearer
from tests.support.stores import sql_store

FLOW = "orders-sync"
BASE = f"/api/v1/flows/{FLOW}/activations"


store = pytest.fixture(sql_store, name="store")


@pytest.fixture
def client(store: SQLStore) -> Iterator[httpx.Client]:
    with LiveServer(create_app(store, CONFIG)) as live, httpx.Client(base_url=live.url, timeout=30) as http:
        http.headers.update(bearer("n8n"))
        yield http


def write_of(order: int, version: int) -> dict[str, Any]:
    return {"operation_id": f"order-{order}:v{version}", "tool": "save_order", "args": {"order": order}}


def start(client: httpx.Client, event_id: str, **body: Any) -> dict[str, Any]:
    response = client.post(BASE, json={"event_id": event_id, **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


def finish(client: httpx.Client, event_id: str, **body: Any) -> dict[str, Any]:
    response = client.post(f"{BASE}/{event_id}/finish", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


# the chain of events both sides replay: (event id, origin event or None, the write it makes, delivered again?)
EVENTS = [("e1", None, 1), ("e2", "e1", 2), ("e3", "e2", 3), ("e1", None, 1), ("e3", "e2", 3)]


def python_side(store: SQLStore) -> list[tuple[str, Any]]:
    """The events through TriggerGuard and a Guard, as a Python workflow would handle them."""
    trigger = TriggerGuard(store, flow=FLOW, max_depth=1)
    seen = []
    for event, origin, version in EVENTS:
        origin_op = write_of(42, version - 1)["operation_id"] if origin else None
        entry = trigger.activate(event, origin_operation_id=origin_op)
        if isinstance(entry, Outcome):
            seen.append((event, (str(entry.status), str(entry.reason))))
            continue
        guard = trigger.guard(entry, budget=Budget(model_turns=0, tool_executions=1))
        w = write_of(42, version)
        write_id = trigger.operation_id(w["operation_id"])  # the flow's namespace (R18)
        ticket = guard.authorize(Call(w["tool"], w["args"], kind="write", operation_id=write_id))
        assert isinstance(ticket, Ticket)
        evidence = {"revision": guard.revision + 1, "done": True, "effect": "committed"}
        verdict = guard.settle(ticket, {"status": "ok", "output": "saved"}, lambda c, r, e=evidence: e)
        assert isinstance(verdict, Verdict)
        outcome = guard.end(verdict)
        seen.append((event, (str(outcome.status), str(outcome.reason))))
    return seen


def http_side(client: httpx.Client) -> list[tuple[str, Any]]:
    """The same events through the API: ask before acting, act only when told to, finish after."""
    seen = []
    for event, origin, version in EVENTS:
        origin_op = write_of(42, version - 1)["operation_id"] if origin else None
        answer = start(client, event, origin_operation_id=origin_op, max_depth=1, write=write_of(42, version))
        if not answer["act"]:
            seen.append((event, (answer["outcome"]["status"], answer["outcome"]["reason"])))
            continue
        ended = finish(client, event, effect="committed", result="saved")["outcome"]
        seen.append((event, (ended["status"], ended["reason"])))
    return seen


def rows(store: SQLStore) -> dict[str, Any]:
    """What the store holds, in a comparable form."""
    return {
        "activations": [
            (a.activation_id, a.granted, a.depth, a.chain_id, a.origin_operation_id, a.reason)
            for a in store.activations()
        ],
        "tasks": sorted(
            (t.task_id, t.status, (t.outcome or {}).get("reason"), t.used.tools, t.budget.tool_executions)
            for t in store.tasks()
        ),
        "operations": sorted((o.operation_id, o.task_id, str(o.state), o.result) for o in store.operations()),
    }


def test_the_api_decides_and_records_exactly_as_trigger_guard(
    client: httpx.Client, store: SQLStore, tmp_path: Any
) -> None:
    over_http = http_side(client)
    reference = SQLStore(f"sqlite:///{tmp_path / 'reference.db'}")
    try:
        from_python = python_side(reference)
        assert (
            over_http
            == from_python
            == [
                ("e1", ("completed", "validated_done")),
                ("e2", ("completed", "validated_done")),
                ("e3", ("stopped", "trigger_chain")),
                ("e1", ("completed", "validated_done")),  # redelivered: the stored outcome, nothing runs
                ("e3", ("stopped", "trigger_chain")),
            ]
        )
        assert rows(store) == rows(reference)
    finally:
        reference.close()
    chain = rows(store)["activations"]
    assert [(a[0], a[1], a[2]) for a in chain] == [
        (f"{FLOW}:e1", True, 0),
        (f"{FLOW}:e2", True, 1),
        (f"{FLOW}:e3", False, 2),
    ]


def test_a_committed_write_is_answered_from_the_ledger_not_made_again(client: httpx.Client) -> None:
    start(client, "e1", write=write_of(7, 1))
    finish(client, "e1", effect="committed", result={"row": 7})
    again = start(client, "e9", write=write_of(7, 1))  # another event asks for the same business write
    assert again["allowed"] is True and again["act"] is False
    assert again["write"] == {
        "operation_id": f"flow:{FLOW}:order-7:v1",
        "replay": True,
        "result": {"status": "ok", "output": {"row": 7}},
    }
    assert finish(client, "e9")["outcome"]["status"] == "completed"


def test_a_write_of_unknown_effect_blocks_every_later_attempt(client: httpx.Client, store: SQLStore) -> None:
    start(client, "e1", write=write_of(8, 1))
    ended = finish(client, "e1", effect="unknown", ending="failed")["outcome"]
    assert (ended["status"], ended["reason"]) == ("needs_reconciliation", "unknown_commit")
    assert ended["operation_id"] == f"flow:{FLOW}:order-8:v1"
    again = start(client, "e2", write=write_of(8, 1))
    assert again["allowed"] is False and again["act"] is False
    assert (again["outcome"]["status"], again["reason"]) == ("needs_reconciliation", "unknown_commit")
    [op] = store.operations(f"{FLOW}:e1")
    assert str(op.state) == "unknown"


def test_not_committed_then_failed_allows_a_bounded_retry(client: httpx.Client) -> None:
    start(client, "e1", write=write_of(9, 1))
    ended = finish(client, "e1", effect="not_committed", ending="failed", detail="receiver said 503")["outcome"]
    assert (ended["status"], ended["reason"]) == ("stopped", "executor_exception")
    assert "bounded_retry" in ended["allowed_next_actions"] and ended["detail"] == "receiver said 503"
    retry = start(client, "e2", write=write_of(9, 1))
    assert retry["act"] is True  # a verified non-execution may be retried


def test_finish_errors_and_idempotence(client: httpx.Client) -> None:
    assert client.post(f"{BASE}/nope/finish", json={}).json()["error"]["kind"] == "not_found"
    start(client, "e1", write=write_of(1, 1))
    missing = client.post(f"{BASE}/e1/finish", json={"ending": "completed"})
    assert missing.status_code == 400 and "effect" in missing.json()["error"]["message"]
    first = finish(client, "e1", effect="committed")
    second = finish(client, "e1", effect="not_committed")
    assert first["already_finished"] is False and second["already_finished"] is True
    assert second["outcome"] == first["outcome"]


def test_parent_activation_stands_for_its_writes(client: httpx.Client) -> None:
    start(client, "e1", write=write_of(5, 1), max_depth=1)
    finish(client, "e1", effect="committed")
    child = start(client, "e2", parent_activation=f"{FLOW}:e1", max_depth=1, write=write_of(5, 2))
    assert child["allowed"] is True and child["depth"] == 1 and child["chain_id"] == f"{FLOW}:e1"
    finish(client, "e2", effect="committed")
    grandchild = start(client, "e3", parent_activation=f"{FLOW}:e2", max_depth=1)
    assert (grandchild["allowed"], grandchild["reason"], grandchild["depth"]) == (False, "trigger_chain", 2)
    unknown = client.post(BASE, json={"event_id": "e4", "parent_activation": f"{FLOW}:nope"})
    assert unknown.status_code == 404
    start(client, "quiet")  # an activation that wrote nothing
    finish(client, "quiet")
    writeless = client.post(BASE, json={"event_id": "e5", "parent_activation": f"{FLOW}:quiet"})
    assert writeless.status_code == 400 and "recorded no write" in writeless.json()["error"]["message"]
    both = client.post(BASE, json={"event_id": "e6", "parent_activation": f"{FLOW}:e1", "origin_operation_id": "x"})
    assert both.status_code == 400


def test_a_workflow_reads_its_own_activation(client: httpx.Client) -> None:
    start(client, "e1", write=write_of(3, 1), budget={"model_turns": 0, "tool_executions": 2})
    view = client.get(f"{BASE}/e1").json()
    assert view["status"] == "running" and view["limits"] == {"model_turns": 0, "tool_executions": 2}
    assert view["writes"] == [{"operation_id": f"flow:{FLOW}:order-3:v1", "tool": "save_order", "state": "unknown"}]
    finish(client, "e1", effect="committed")
    assert client.get(f"{BASE}/e1").json()["outcome"]["status"] == "completed"
    assert client.get(f"{BASE}/e404").status_code == 404


def test_empty_strings_from_workflow_tools_mean_absent(client: httpx.Client) -> None:
    answer = start(client, "e1", origin_operation_id="", parent_activation="")
    assert answer["allowed"] is True and answer["origin_operation_id"] is None
    bad = client.post(BASE, json={"event_id": ""})
    assert bad.status_code == 400
