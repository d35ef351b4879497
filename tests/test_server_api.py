"""The HTTP API against a real Uvicorn server on 127.0.0.1, with httpx, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agents_loopguard.server import create_app
from agents_loopguard.store.sql import SQLStore
from tests.support.live_server import LiveServer
from tests.support.server_env import (
    CONFIG,
    PLANTED,
    SECRETS,
    bearer,
    budget_stopped,
    lost_write,
    paused_task,
)
from tests.support.stores import sql_store

store = pytest.fixture(sql_store, name="store")


@pytest.fixture
def server(store: SQLStore) -> Iterator[LiveServer]:
    with LiveServer(create_app(store, CONFIG)) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The JSON error of a refused request, after checking its status and shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"status", "kind", "type", "exit_code", "message"} and error["status"] == status
    return dict(error)


def no_secret_in(response: httpx.Response) -> None:
    text = response.text + str(response.headers)
    for secret in (*SECRETS.values(), PLANTED):
        assert secret not in text


# --- authentication and scopes ------------------------------------------------------------------------------------


def test_health_and_the_versioned_schema_need_no_token(client: httpx.Client) -> None:
    assert client.get("/api/v1/health").json() == {"ok": True}
    schema = client.get("/api/v1/openapi.json").json()
    assert schema["info"]["version"] == "1"
    for path in ("/api/v1/tasks", "/api/v1/tasks/{task_id}/stop", "/api/v1/pauses/{pause_id}/decisions"):
        assert path in schema["paths"]
    assert "/api/v1/flows/{flow}/activations" in schema["paths"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer not-a-token-of-this-server"},
        {"Authorization": f"Basic {SECRETS['ana']}"},
        {"Cookie": f"loopguard_session={SECRETS['ana']}"},
    ],
    ids=["none", "empty", "wrong", "basic-scheme", "cookie-instead"],
)
def test_without_a_valid_bearer_token_every_route_is_401(client: httpx.Client, headers: dict[str, str]) -> None:
    for method, path in [
        ("GET", "/api/v1/tasks"),
        ("GET", "/api/v1/pauses"),
        ("POST", "/api/v1/tasks/t-1/stop"),
        ("POST", "/api/v1/flows/orders-sync/activations"),
    ]:
        response = client.request(method, path, headers=headers, json={})
        error = error_of(response, 401)
        assert error["kind"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
        no_secret_in(response)


def test_a_workflow_token_is_403_outside_its_scope(client: httpx.Client, store: SQLStore) -> None:
    pause_id = paused_task(store, "ticket-1")
    n8n = bearer("n8n")
    for method, path, body in [
        ("GET", "/api/v1/tasks", None),
        ("GET", "/api/v1/tasks/ticket-1", None),
        ("GET", f"/api/v1/pauses/{pause_id}", None),
        ("POST", f"/api/v1/pauses/{pause_id}/decisions", {"decision": "approve"}),
        ("POST", "/api/v1/tasks/ticket-1/stop", {"reason": "x"}),
        ("POST", "/api/v1/flows/payroll/activations", {"event_id": "e-1"}),  # a flow it does not list
        ("GET", "/api/v1/flows/payroll/activations/e-1", None),
    ]:
        error = error_of(client.request(method, path, headers=n8n, json=body), 403)
        assert error["kind"] == "forbidden"
    assert store.pause(pause_id).status == "pending"  # type: ignore[union-attr]
    assert store.task("ticket-1").stop_reason is None  # type: ignore[union-attr]
    started = client.post("/api/v1/flows/orders-sync/activations", headers=n8n, json={"event_id": "e-1"})
    assert started.status_code == 200 and started.json()["allowed"] is True


# --- tasks --------------------------------------------------------------------------------------------------------


def test_tasks_list_with_status_filter_and_paging(client: httpx.Client, store: SQLStore) -> None:
    paused_task(store, "ticket-1")
    budget_stopped(store, "search-2")
    lost_write(store, "pay-3", "inv-3")
    ana = bearer("ana")
    rows = client.get("/api/v1/tasks", headers=ana).json()["tasks"]
    assert [r["task_id"] for r in rows] == ["pay-3", "search-2", "ticket-1"]  # newest first
    assert rows[1]["used"]["models"] == 1 and rows[1]["limits"]["models"] == 1 and rows[1]["left"]["models"] == 0
    stopped = client.get("/api/v1/tasks", params={"status": "stopped"}, headers=ana).json()["tasks"]
    assert [(r["task_id"], r["reason"]) for r in stopped] == [("search-2", "model_budget")]
    first = client.get("/api/v1/tasks", params={"limit": 1}, headers=ana).json()
    page = client.get("/api/v1/tasks", params={"limit": 1, "cursor": first["next"]}, headers=ana).json()
    assert [r["task_id"] for r in page["tasks"]] == ["search-2"] and page["next"]
    bad = error_of(client.get("/api/v1/tasks", params={"cursor": "not-ours"}, headers=ana), 400)
    assert bad["kind"] == "input" and "cursor" in bad["message"]
    error = error_of(client.get("/api/v1/tasks", params={"status": "sleeping"}, headers=ana), 400)
    assert error["kind"] == "input" and "sleeping" in error["message"] and error["exit_code"] == 2


def test_one_task_with_counters_timeline_and_ledger(client: httpx.Client, store: SQLStore) -> None:
    lost_write(store, "pay-3", "inv-3")
    view = client.get("/api/v1/tasks/pay-3", headers=bearer("ana")).json()
    assert view["task"]["status"] == "needs_reconciliation"
    assert view["task"]["used"] == {"models": 1, "tools": 1, "cost": 0.0}
    assert view["task"]["left"]["tools"] == 2
    assert [(o["operation_id"], o["state"]) for o in view["operations"]] == [("inv-3", "unknown")]
    assert [s["kind"] for s in view["timeline"]] == ["model", "tool"]
    assert view["allowed_next_actions"] == ["query_operation_status", "human_review"]
    error = error_of(client.get("/api/v1/tasks/nope", headers=bearer("ana")), 404)
    assert error["kind"] == "not_found" and error["type"] == "NotFoundError"


def test_stop_records_the_operator_and_is_set_once(client: httpx.Client, store: SQLStore) -> None:
    paused_task(store, "ticket-1")
    first = client.post("/api/v1/tasks/ticket-1/stop", headers=bearer("bob"), json={"reason": "runaway"}).json()
    assert first["stop_mark"] == "runaway" and first["who"] == "bob" and first["set_now"] is True
    again = client.post("/api/v1/tasks/ticket-1/stop", headers=bearer("ana"), json={"reason": "other"}).json()
    assert again["stop_mark"] == "runaway" and again["set_now"] is False
    assert store.task("ticket-1").stop_reason == "runaway"  # type: ignore[union-attr]
    error_of(client.post("/api/v1/tasks/nope/stop", headers=bearer("ana"), json={}), 404)


def test_reconcile_then_record(client: httpx.Client, store: SQLStore) -> None:
    lost_write(store, "pay-3", "inv-3")
    ana = bearer("ana")
    bad = client.post("/api/v1/operations/inv-3/reconcile", headers=ana, json={"answer": "maybe"})
    assert error_of(bad, 400)["kind"] == "input"
    before = client.get("/api/v1/operations/inv-3", headers=ana).json()
    assert (before["state"], before["task_id"], before["attempts"]) == ("unknown", "pay-3", 1)
    assert error_of(client.get("/api/v1/operations/nope", headers=ana), 404)["kind"] == "not_found"
    done = client.post(
        "/api/v1/operations/inv-3/reconcile",
        headers=ana,
        json={"answer": "committed", "why": "receipt R-9", "result": {"status": "ok", "output": "paid"}},
    ).json()
    assert done["state"] == "committed" and done["task_reopened"] is True
    assert done["transition"]["who"] == "ana" and done["transition"]["why"] == "receipt R-9"
    again = client.post("/api/v1/operations/inv-3/reconcile", headers=ana, json={"answer": "not_committed"})
    error = error_of(again, 409)
    assert error["kind"] == "state" and error["exit_code"] == 1
    assert error_of(client.get("/api/v1/records/pay-3", headers=ana), 409)["kind"] == "state"  # running now


def test_recover_extends_limits_and_keeps_counters(client: httpx.Client, store: SQLStore) -> None:
    budget_stopped(store, "search-2")
    ana = bearer("ana")
    record = client.get("/api/v1/records/search-2", headers=ana).json()
    assert (record["status"], record["reason"]) == ("stopped", "model_budget")
    error_of(client.post("/api/v1/tasks/search-2/recover", headers=ana, json={"why": ""}), 400)
    done = client.post("/api/v1/tasks/search-2/recover", headers=ana, json={"why": "new pages", "more_turns": 2})
    body = done.json()
    assert body["task"]["limits"]["models"] == 3 and body["task"]["used"]["models"] == 1
    assert body["transition"]["who"] == "ana" and body["transition"]["kind"] == "recover"
    assert error_of(client.post("/api/v1/tasks/search-2/recover", headers=ana, json={"why": "x"}), 409)


# --- pauses and decisions -----------------------------------------------------------------------------------------


def test_pending_pause_shows_redacted_arguments_and_the_tasks_budget(client: httpx.Client, store: SQLStore) -> None:
    pause_id = paused_task(store, "ticket-1", note="<script>alert(1)</script>")
    response = client.get("/api/v1/pauses", headers=bearer("ana"))
    no_secret_in(response)
    [pause] = response.json()["pauses"]
    assert pause["pause_id"] == pause_id and pause["digest_ok"] is True
    [call] = pause["pending_calls"]
    assert call["tool"] == "refund" and call["operation_id"] == "refund-order-40"
    assert call["arguments"] == {"order": 40, "note": "<script>alert(1)</script>", "api_key": "[redacted]"}
    assert pause["task"]["used"]["models"] == 1 and pause["task"]["left"]["models"] == 3
    one = client.get(f"/api/v1/pauses/{pause_id}", headers=bearer("ana")).json()
    assert one["status"] == "pending" and one["pending_calls"] == pause["pending_calls"]


def test_decisions_per_call_record_the_authenticated_operator(client: httpx.Client, store: SQLStore) -> None:
    pause_id = paused_task(store, "ticket-1", calls=2)
    ana = bearer("ana")
    partial = client.post(f"/api/v1/pauses/{pause_id}/decisions", headers=ana, json={"approve": ["call-0"]})
    assert "undecided" in error_of(partial, 400)["message"]
    foreign = client.post(f"/api/v1/pauses/{pause_id}/decisions", headers=ana, json={"approve": ["call-9"]})
    assert error_of(foreign, 400)["kind"] == "input"
    forged = client.post(
        f"/api/v1/pauses/{pause_id}/decisions", headers=ana, json={"decision": "approve", "who": "mallory"}
    )
    assert error_of(forged, 400)["kind"] == "input"  # who is the token's name, never the body's
    decided = client.post(
        f"/api/v1/pauses/{pause_id}/decisions",
        headers=ana,
        json={"approve": ["call-0"], "reject": ["call-1"], "why": "order 41 was refunded already"},
    ).json()
    assert decided["decisions"] == {"call-0": "approve", "call-1": "reject"}
    assert decided["decided_by"] == "ana" and decided["status"] == "decided"
    stored = store.pause(pause_id)
    assert stored is not None and stored.decided_by == "ana"


@pytest.mark.timeout(120)
def test_concurrent_decisions_on_one_pause_exactly_one_wins(server: LiveServer, store: SQLStore) -> None:
    pause_id = paused_task(store, "ticket-1")
    racers = 8
    barrier = threading.Barrier(racers)
    answers: list[tuple[str, str, httpx.Response]] = []
    lock = threading.Lock()

    def decide(index: int) -> None:
        who = ("ana", "bob")[index % 2]
        verb = ("approve", "reject")[index // 2 % 2]
        with httpx.Client(base_url=server.url, timeout=60) as http:
            http.get("/api/v1/health")  # connect before the race
            barrier.wait()
            response = http.post(f"/api/v1/pauses/{pause_id}/decisions", headers=bearer(who), json={"decision": verb})
        with lock:
            answers.append((who, verb, response))

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [(who, verb) for who, verb, r in answers if r.status_code == 200]
    lost = [r for _, _, r in answers if r.status_code != 200]
    assert len(won) == 1, [(w, v, r.status_code, r.text) for w, v, r in answers]
    assert len(lost) == racers - 1 and all(error_of(r, 409)["kind"] == "state" for r in lost)
    stored = store.pause(pause_id)
    assert stored is not None and stored.status == "decided"
    assert (stored.decided_by, stored.decisions) == (won[0][0], {"call-0": won[0][1]})


# --- requests the API refuses before they reach the store ---------------------------------------------------------


def test_malformed_bodies_are_400_without_echoing_their_values(client: httpx.Client, store: SQLStore) -> None:
    paused_task(store, "ticket-1")
    ana = bearer("ana")
    response = client.post("/api/v1/tasks/ticket-1/stop", headers=ana, json={"reason": 5, "extra": PLANTED})
    assert error_of(response, 400)["kind"] == "input"
    no_secret_in(response)
    not_json = client.post(
        "/api/v1/tasks/ticket-1/stop", headers={**ana, "content-type": "application/json"}, content=b"{"
    )
    assert error_of(not_json, 400)["kind"] == "input"
    huge = client.post("/api/v1/tasks/ticket-1/stop", headers=ana, json={"reason": "x" * (2 << 20)})
    assert error_of(huge, 413)["kind"] == "input"
    assert store.task("ticket-1").stop_reason is None  # type: ignore[union-attr]


def test_answers_carry_security_headers_and_no_secret(client: httpx.Client, store: SQLStore) -> None:
    pause_id = paused_task(store, "ticket-1")
    for path in ("/api/v1/tasks", "/api/v1/tasks/ticket-1", f"/api/v1/pauses/{pause_id}", "/api/v1/pauses"):
        response = client.get(path, headers=bearer("ana"))
        assert response.status_code == 200
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"
        assert "default-src 'none'" in response.headers["content-security-policy"]
        no_secret_in(response)


def test_ids_with_a_slash_are_addressable(client: httpx.Client, store: SQLStore) -> None:
    paused_task(store, "tenant-a/ticket-5")
    view = client.get("/api/v1/tasks/tenant-a%2Fticket-5", headers=bearer("ana"))
    assert view.status_code == 200 and view.json()["task"]["task_id"] == "tenant-a/ticket-5"
    stopped = client.post("/api/v1/tasks/tenant-a%2Fticket-5/stop", headers=bearer("ana"), json={"reason": "x"})
    assert stopped.json()["task_id"] == "tenant-a/ticket-5" and stopped.json()["set_now"] is True


def test_no_secret_reaches_the_server_log(
    store: SQLStore, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level("DEBUG")
    pause_id = paused_task(store, "ticket-1")
    with LiveServer(create_app(store, CONFIG), log_level="debug") as live, httpx.Client(base_url=live.url) as http:
        http.get("/api/v1/tasks", headers={"Authorization": "Bearer sk-guess-not-a-token-0123456789"})
        http.get("/api/v1/tasks", headers=bearer("ana"))
        http.post(f"/api/v1/pauses/{pause_id}/decisions", headers=bearer("bob"), json={"decision": "approve"})
        http.post("/api/v1/tasks/ticket-1/stop", headers=bearer("ana"), json={"reason": f"token={PLANTED}"})
        http.post("/login", data={"token": SECRETS["ana"]})  # no CSRF: refused, and the token is not logged
    logged = caplog.text + "".join(capfd.readouterr())
    assert "GET /api/v1/tasks" in logged  # the access log is there...
    for secret in (*SECRETS.values(), PLANTED, "sk-guess-not-a-token-0123456789"):
        assert secret not in logged  # ...and holds no secret
