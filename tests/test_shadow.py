"""Shadow mode (R21): every loop rule evaluated and recorded as a would-be verdict, nothing refused for it; and what
shadow mode never relaxes (budgets, the deadline, the stop mark, the write ledger, a tool's own limit). On SQLite and
PostgreSQL, with the corpus's loops run through the engine; the would-be verdicts read back through ``loopguard
show``, the console and ``/metrics``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents_loopguard import Budget, Guard, MemoryStore, Policy, Reason, Status, Verdict, cli
from agents_loopguard.server import ServerConfig, Tokens, create_app
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.outcome import LOOP_REASONS
from benchmarks.efficacy.corpus import build
from benchmarks.efficacy.paths import run, unguarded
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.timeout(240)

SHADOW = Policy(shadow=True)
SEARCH = {"tool": "search", "kind": "read", "args": {"q": "refunds"}}
NOTHING_NEW = {"revision": 0, "done": False, "effect": "none"}


@pytest.fixture
def store(sql_url: str) -> Iterator[SQLStore]:
    with SQLStore(sql_url) as opened:
        yield opened


def shadowed(store: Any, task_id: str) -> list[str]:
    return [
        e.result_class.removeprefix("shadow:") for e in store.trace(task_id) if e.result_class.startswith("shadow:")
    ]


def test_r21_in_shadow_mode_every_loop_of_the_corpus_runs_on_and_records_the_verdict_that_would_have_cut_it(
    store: SQLStore,
) -> None:
    """R21: one loop of each shape whose cut is a loop rule: enforced, it ends with that rule; in shadow mode it
    runs until the model gives up (every body of the script runs) and its trace records the same rule first."""
    chosen: dict[str, Any] = {}
    for trajectory in build():
        if trajectory.label == "loop" and trajectory.shape not in chosen:
            enforced = run(trajectory, "engine", store=MemoryStore()).outcome
            if enforced.reason in LOOP_REASONS:
                chosen[trajectory.shape] = (trajectory, enforced.reason)
    assert len(chosen) >= 7, sorted(chosen)
    for shape, (trajectory, reason) in chosen.items():
        ran = run(trajectory, "engine", policy=SHADOW, store=store)
        assert ran.outcome.status is Status.PARTIAL, (shape, ran.outcome)
        assert ran.bodies == unguarded(trajectory)[0], shape
        would = shadowed(store, ran.outcome.task_id)
        assert would and would[0] == str(reason), (shape, would)
        assert not [e for e in store.trace(ran.outcome.task_id) if e.result_class.startswith("refused:")]


def test_r21_shadow_mode_never_relaxes_a_budget_a_tools_own_limit_or_the_deadline(store: SQLStore) -> None:
    """R21: the identical search would have been refused at its third run; in shadow mode it runs on, until the
    task's execution budget (5) refuses the sixth; a tool's own limit and the deadline hold the same way."""
    guard = Guard(budget=Budget(20, 5), store=store, task_id="shadow-budget", policy=SHADOW)
    verdict = None
    for _ in range(10):
        ticket = guard.authorize(SEARCH)
        if isinstance(ticket, Verdict):
            verdict = ticket
            break
        assert guard.settle(ticket, {"status": "ok"}, evidence=NOTHING_NEW) is None
    assert verdict is not None and verdict.reason is Reason.TOOL_BUDGET
    assert "same_call" in shadowed(store, "shadow-budget") and "no_progress" in shadowed(store, "shadow-budget")
    limited = Guard(budget=Budget(20, 20), store=store, task_id="shadow-limit", policy=SHADOW)
    tickets = [limited.authorize({**SEARCH, "max_executions": 2}) for _ in range(3)]
    assert isinstance(tickets[2], Verdict) and tickets[2].reason is Reason.TOOL_LIMIT
    clock = [0.0]
    late = Guard(
        budget=Budget(9, 9, deadline=10.0), store=store, task_id="shadow-late", policy=SHADOW, clock=lambda: clock[0]
    )
    clock[0] = 10.0
    refused = late.authorize(SEARCH)
    assert isinstance(refused, Verdict) and refused.reason is Reason.DEADLINE


def test_r21_shadow_mode_never_relaxes_the_stop_mark_or_the_write_ledger(store: SQLStore) -> None:
    """R21: the stop mark stops a shadowed task; a committed write sent again is answered
    from the ledger (never executed twice) while the repeats are only recorded; an unknown write still needs
    reconciliation, and sending it again is refused."""
    guard = Guard(budget=Budget(20, 20), store=store, task_id="shadow-stop", policy=SHADOW)
    ticket = guard.authorize(SEARCH)
    assert not isinstance(ticket, Verdict)
    guard.settle(ticket, {"status": "ok"}, evidence=NOTHING_NEW)
    store.request_stop("shadow-stop", "operator")
    stopped = guard.begin_turn()
    assert stopped is not None and stopped.reason is Reason.STOP_REQUESTED

    executed: list[int] = []
    write = {"tool": "confirm", "kind": "write", "operation_id": "shadow-order-9", "args": {"order": 9}}
    ledger = Guard(budget=Budget(20, 20), store=store, task_id="shadow-ledger", policy=SHADOW)
    for _ in range(5):
        ticket = ledger.authorize(write)
        assert not isinstance(ticket, Verdict)
        if not ticket.replay:
            executed.append(9)
        result = ticket.result if ticket.replay else {"status": "ok", "receipt": "r-9"}
        assert ledger.settle(ticket, result, evidence={"revision": 1, "done": False, "effect": "committed"}) is None
    assert executed == [9] and "same_call" in shadowed(store, "shadow-ledger")

    lost = Guard(budget=Budget(20, 20), store=store, task_id="shadow-lost", policy=SHADOW)
    ticket = lost.authorize({**write, "operation_id": "shadow-order-10"})
    assert not isinstance(ticket, Verdict)
    unknown = lost.fail(ticket, TimeoutError("no answer"))
    assert unknown.status is Status.NEEDS_RECONCILIATION
    again = lost.authorize({**write, "operation_id": "shadow-order-10"})
    assert isinstance(again, Verdict) and again.reason is Reason.UNKNOWN_COMMIT


def test_r21_shadow_mode_by_task_family_and_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """R21: ``Policy(shadow=("orders-sync",))`` shadows that family only; ``LOOPGUARD_SHADOW`` adds families (or
    ``all``) without a change of code."""

    def third_search(task_id: str, policy: Policy, family: str | None = None) -> Any:
        guard = Guard(budget=Budget(9, 9), store=MemoryStore(), task_id=task_id, policy=policy, family=family)
        for _ in range(3):
            ticket = guard.authorize(SEARCH)
            if isinstance(ticket, Verdict):
                return ticket.reason
            guard.settle(ticket, {"status": "ok"}, evidence=NOTHING_NEW)
        return None

    family = Policy(shadow=("orders-sync",))
    assert third_search("evt-1", family, family="orders-sync") is None  # the family the run names
    assert third_search("evt-2", family) is Reason.SAME_CALL  # the id's family, evt
    assert third_search("tickets-1", family) is Reason.SAME_CALL
    monkeypatch.setenv("LOOPGUARD_SHADOW", "tickets, refunds")
    assert third_search("tickets-1", Policy()) is None and third_search("billing-1", Policy()) is Reason.SAME_CALL
    monkeypatch.setenv("LOOPGUARD_SHADOW", "all")
    assert third_search("billing-1", Policy()) is None


METRICS = "prom-metrics-secret-29a1f0c3e7b5"
OPERATOR = "operator-secret-29b7d1e4a6c2"


def test_r21_would_be_verdicts_show_in_loopguard_show_the_console_and_the_metrics(
    store: SQLStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """R21: the would-be verdicts of a shadowed loop, as an operator reads them: ``loopguard show`` (a summary line
    and the timeline), the console's task page, and ``loopguard_shadow_verdicts_total`` at ``/metrics``."""
    guard = Guard(budget=Budget(20, 20), store=store, task_id="ticket-7", policy=SHADOW)
    for _ in range(4):
        ticket = guard.authorize(SEARCH)
        assert not isinstance(ticket, Verdict)
        guard.settle(ticket, {"status": "ok"}, evidence=NOTHING_NEW)
    guard.end(Verdict(Status.PARTIAL, Reason.UNVERIFIED_FINAL, "the model answered"))
    with pytest.raises(SystemExit) as done:
        cli.main(["--db", store.url.render_as_string(hide_password=False), "show", "ticket-7"])
    shown = capsys.readouterr().out
    assert done.value.code == 0, shown
    assert "would have stopped the task: no_progress 2, same_call 2" in shown
    assert shown.count("shadow:same_call") == 2
    tokens = Tokens.parse(f"ana:operator:{OPERATOR} prom:metrics:{METRICS}")
    with LiveServer(create_app(store, ServerConfig(tokens=tokens))) as live, httpx.Client(base_url=live.url) as http:
        metrics = http.get("/metrics", headers={"Authorization": f"Bearer {METRICS}"}).text
        form = http.get("/login").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
        assert csrf is not None
        http.post("/login", data={"token": OPERATOR, "csrf_token": csrf[1], "next": "/"})
        page = http.get("/tasks/ticket-7")
    counted = {
        s.labels["reason"]: s.value
        for f in text_string_to_metric_families(metrics)
        for s in f.samples
        if s.name == "loopguard_shadow_verdicts_total"
    }
    assert counted == {"same_call": 2, "no_progress": 2}
    assert page.status_code == 200, page.text
    assert page.text.count(">shadow:same_call</span>") == 2 and "would have stopped the task here" in page.text
