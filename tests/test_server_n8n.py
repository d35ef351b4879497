"""The n8n example: the workflow export's requests, replayed against a real loopguard server and a real order service.

The flow syncs an order whenever the order changes; its own sync changes the order, which fires the flow again. The
export asks loopguard before acting (``max_depth: 1``: the flow may re-enter itself once) and finishes the
activation after. The chain is cut at the documented depth: the second echo is refused, ``stopped/trigger_chain``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents_loopguard.server import create_app
from agents_loopguard.store.sql import SQLStore
from tests.support.live_server import LiveServer
from tests.support.n8n_replay import N8nReplay
from tests.support.server_env import CONFIG, bearer
from tests.support.stores import sql_store

EXPORT = Path(__file__).resolve().parents[1] / "examples" / "n8n" / "orders-sync.workflow.json"
FLOW = "orders-sync"


class OrderService:
    """The application's order service: syncing an order bumps its version and emits a change event."""

    def __init__(self) -> None:
        self.orders: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.syncs: list[str] = []
        self.failing = False
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                order_id = int(self.path.split("/")[2])
                status, answer = service.sync(order_id, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def change(self, order_id: int, written_by: str | None = None) -> None:
        """A row change: a new version, and the change event that fires the flow."""
        with self.lock:
            order = self.orders.setdefault(order_id, {"version": 0, "written_by": None})
            order["version"] += 1
            order["written_by"] = written_by
            event = {"order_id": order_id, "version": order["version"], "written_by": written_by}
            self.events.append({"event_id": f"chg-{len(self.events) + 1}", **event})

    def sync(self, order_id: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.failing:
            return 500, {"error": "database unavailable"}
        with self.lock:
            if self.orders[order_id]["version"] != body["expected_version"]:
                return 409, {"error": "stale version"}
            self.syncs.append(body["written_by"])
        self.change(order_id, written_by=body["written_by"])  # the flow's own write fires the flow again
        return 200, {"order_id": order_id, "version": self.orders[order_id]["version"], "status": "synced"}

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


store = pytest.fixture(sql_store, name="store")


@pytest.fixture
def world(store: SQLStore) -> Iterator[tuple[N8nReplay, OrderService, httpx.Client]]:
    orders = OrderService()
    with LiveServer(create_app(store, CONFIG)) as server, httpx.Client(timeout=30) as client:
        replay = N8nReplay(
            json.loads(EXPORT.read_text()),
            hosts={"http://127.0.0.1:8765": server.url, "http://127.0.0.1:8766": orders.url},
            credentials={"loopguard-workflow-token": bearer("n8n")},
        )
        yield replay, orders, client
    orders.close()


def deliver_all(replay: N8nReplay, orders: OrderService, client: httpx.Client, start: int = 0) -> list[list[str]]:
    """Deliver every change event, including the ones the flow's own writes emit, until the feed is quiet."""
    runs, index = [], start
    while index < len(orders.events):
        assert index < 20, "the chain never stopped"
        runs.append(replay.run(orders.events[index], client).executed)
        index += 1
    return runs


def test_a_self_retriggering_chain_is_cut_at_max_depth(
    world: tuple[N8nReplay, OrderService, httpx.Client], store: SQLStore
) -> None:
    replay, orders, client = world
    orders.change(42)  # a user edits order 42: version 1, written by nobody
    runs = deliver_all(replay, orders, client)
    acted = ["Order changed", "Ask loopguard", "Act now?", "Sync order", "Finish: committed"]
    refused = ["Order changed", "Ask loopguard", "Act now?", "Allowed?", "Refused: stop here"]
    assert runs == [acted, acted, refused]  # the outside change, its echo (re-entry 1), the echo's echo: cut
    assert orders.orders[42]["version"] == 3 and len(orders.syncs) == 2
    chain = [(a.activation_id, a.granted, a.depth, a.chain_id, a.reason) for a in store.activations(FLOW)]
    assert chain == [
        (f"{FLOW}:chg-1", True, 0, f"{FLOW}:chg-1", None),
        (f"{FLOW}:chg-2", True, 1, f"{FLOW}:chg-1", None),
        (f"{FLOW}:chg-3", False, 2, f"{FLOW}:chg-1", "trigger_chain"),
    ]
    ends = {t.task_id: (t.status, (t.outcome or {}).get("reason")) for t in store.tasks()}
    assert ends == {
        f"{FLOW}:chg-1": ("completed", "validated_done"),
        f"{FLOW}:chg-2": ("completed", "validated_done"),
        f"{FLOW}:chg-3": ("stopped", "trigger_chain"),
    }
    assert [(o.operation_id, str(o.state)) for o in store.operations()] == [
        ("flow:orders-sync:order-42:from-v1", "committed"),
        ("flow:orders-sync:order-42:from-v2", "committed"),
    ]
    again = replay.run(orders.events[0], client)  # n8n delivers the first event again: it runs once
    assert again.executed == refused and len(orders.syncs) == 2


def test_an_unconfirmed_sync_finishes_unknown_and_blocks_the_write(
    world: tuple[N8nReplay, OrderService, httpx.Client], store: SQLStore
) -> None:
    replay, orders, client = world
    orders.change(7)
    orders.failing = True
    run = replay.run(orders.events[0], client)
    assert run.executed[-2:] == ["Sync order", "Finish: unknown"]
    task = store.task(f"{FLOW}:chg-1")
    assert task is not None and task.status == "needs_reconciliation"
    orders.failing = False
    orders.events.append({**orders.events[0], "event_id": "chg-retry"})  # the same change, delivered as new
    retry = replay.run(orders.events[-1], client)
    assert retry.executed[-2:] == ["Allowed?", "Refused: stop here"] and orders.syncs == []
    reason = client.get(
        f"{replay.hosts['http://127.0.0.1:8765']}/api/v1/flows/{FLOW}/activations/chg-retry", headers=bearer("n8n")
    ).json()["outcome"]["reason"]
    assert reason == "unknown_commit"


def test_the_export_holds_no_secret_and_every_request_names_the_flow() -> None:
    text = EXPORT.read_text()
    workflow = json.loads(text)
    assert "Bearer" not in text.replace("Authorization: Bearer ...", "") and "secret" not in text.lower()
    http = [n for n in workflow["nodes"] if n["type"] == "n8n-nodes-base.httpRequest"]
    guard = [n for n in http if "/api/v1/flows/orders-sync/activations" in n["parameters"]["url"]]
    assert len(guard) == 4 and all(n["credentials"]["httpHeaderAuth"]["id"] for n in http)
