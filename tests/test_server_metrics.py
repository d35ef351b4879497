"""``GET /metrics`` scraped over HTTP from a live server on SQLite and PostgreSQL, parsed with
``prometheus_client.parser``: the numbers are the store's, for tasks made by the real guard."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents_loopguard import Budget, Guard, Verdict
from agents_loopguard.ops.retention import RetentionPolicy, prune
from agents_loopguard.server import ServerConfig, Tokens, create_app
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.calls import Ticket
from tests.support.live_server import LiveServer
from tests.support.server_env import SECRETS, budget_stopped, lost_write, paused_task
from tests.support.stores import sql_store

METRICS_SECRET = "prom-metrics-secret-5c8e1a7d3b9f"
TOKENS = Tokens.parse(
    f"ana:operator:{SECRETS['ana']} n8n:workflow:{SECRETS['n8n']}:orders-sync prom:metrics:{METRICS_SECRET}"
)

store = pytest.fixture(sql_store, name="store")


@pytest.fixture
def url(store: SQLStore) -> Iterator[str]:
    with LiveServer(create_app(store, ServerConfig(tokens=TOKENS))) as live:
        yield live.url


def samples(url: str, secret: str = METRICS_SECRET) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def same_call_loop(store: SQLStore, task_id: str) -> None:
    """A task whose third identical read is refused (same_call) and ends it."""
    guard = Guard(budget=Budget(9, 9), store=store, task_id=task_id)
    for _ in range(3):
        decided = guard.authorize({"tool": "search", "kind": "read", "args": {"q": "x"}})
        if isinstance(decided, Verdict):
            guard.end(decided)
            return
        assert isinstance(decided, Ticket)
        guard.settle(decided, {"status": "ok"}, evidence={"revision": 0, "done": False, "effect": "none"})
    raise AssertionError("the loop was not refused")


def test_metrics_count_what_the_store_holds(url: str, store: SQLStore) -> None:
    same_call_loop(store, "ticket-1")
    budget_stopped(store, "ticket-2")
    Guard(budget=Budget(5, 3), store=store, task_id="ticket-3")  # running, nothing used
    paused_task(store, "refund-77")
    time.sleep(0.05)  # the pause has an age
    got = samples(url)
    stopped = (("family", "ticket"), ("status", "stopped"))
    assert got[("loopguard_tasks", (stopped[0], ("reason", "same_call"), stopped[1]))] == 1
    assert got[("loopguard_tasks", (stopped[0], ("reason", "model_budget"), stopped[1]))] == 1
    assert got[("loopguard_tasks", (("family", "ticket"), ("reason", ""), ("status", "running")))] == 1
    assert got[("loopguard_tasks", (("family", "refund"), ("reason", "approval"), ("status", "needs_human")))] == 1
    assert got[("loopguard_refusals_total", (("family", "ticket"), ("reason", "same_call")))] == 1
    assert got[("loopguard_pauses_pending", ())] == 1
    assert 0 < got[("loopguard_pause_oldest_age_seconds", ())] < 600
    assert got[("loopguard_unknown_writes", ())] == 0
    running = (("counter", "tool_executions"), ("family", "ticket"), ("status", "running"))
    assert (got[("loopguard_budget_used", running)], got[("loopguard_budget_limit", running)]) == (0, 3)
    ended = (("counter", "model_turns"), ("family", "ticket"), ("status", "ended"))
    assert got[("loopguard_budget_limit", ended)] == 9 + 1  # ticket-1 and ticket-2
    assert got[("loopguard_budget_used", ended)] == 1  # ticket-2's one turn; ticket-1 asked for none
    again = samples(url)  # the store's read of the first scrape is in the histogram now
    assert again[("loopguard_store_read_seconds_count", (("read", "measures"),))] >= 1


def test_an_unknown_write_has_its_own_gauge_and_a_prune_keeps_the_refusal_counter(url: str, store: SQLStore) -> None:
    """R22: operators alert on unknown writes; a refusal counted once stays counted when its trace is pruned."""
    lost_write(store, "pay-3", "inv-3")
    same_call_loop(store, "ticket-1")
    got = samples(url)
    assert got[("loopguard_unknown_writes", ())] == 1 and got[("loopguard_unknown_write_oldest_age_seconds", ())] >= 0
    refused = ("loopguard_refusals_total", (("family", "ticket"), ("reason", "same_call")))
    assert got[refused] == 1
    removed = prune(store, RetentionPolicy(older_than_days=0), now=time.time() + 1)["removed"]
    assert removed["tasks"] == 1 and store.task("ticket-1") is None and store.task("pay-3") is not None
    after = samples(url)
    assert after[refused] == 1, "a counter never goes back"
    assert ("loopguard_tasks", (("family", "ticket"), ("reason", "same_call"), ("status", "stopped"))) not in after
    assert after[("loopguard_unknown_writes", ())] == 1, "a task with an unknown write is never pruned"


def test_metrics_need_a_metrics_or_operator_token(url: str) -> None:
    assert httpx.get(f"{url}/metrics", timeout=30).status_code == 401
    workflow = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {SECRETS['n8n']}"}, timeout=30)
    assert workflow.status_code == 403 and workflow.json()["error"]["kind"] == "forbidden"
    assert ("loopguard_pauses_pending", ()) in samples(url, SECRETS["ana"])
    for path in ("/api/v1/tasks", "/api/v1/pauses"):  # the metrics token reads nothing else
        answer = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {METRICS_SECRET}"}, timeout=30)
        assert answer.status_code == 403, path
