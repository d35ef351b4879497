"""What an approver is told before deciding, and what the command line says about pauses and reconciliations
(issue 28): a pending call whose operation is already ``unknown``, the arguments of each pending call, how many
tasks an answer reopened and that they wait for a run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agents import Agent
from agents.testing import ScriptedModel, assistant_message

from agents_loopguard import Budget, Guard, Reason, Status, create_runner
from agents_loopguard.sdk import guarded_tool, resume_guarded_sync
from agents_loopguard.server import create_app
from agents_loopguard.store.sql import SQLStore
from tests.support.live_server import LiveServer
from tests.support.server_env import CONFIG, PLANTED, SECRETS, bearer, paused_task
from tests.test_cli import loopguard

BODIES: list[dict[str, Any]] = []
"""The refund bodies that ran in this process (the side effect approving would have)."""


@guarded_tool(
    kind="write",
    operation_id=lambda a: f"refund-order-{a['order']}",
    verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
    needs_approval=True,
)
def refund(order: int, note: str, api_key: str = "") -> str:
    """Refund an order (a human approves every refund)."""
    BODIES.append({"order": order})
    return f"refunded {order}"


def lost_refund(store: SQLStore, task_id: str, args: dict[str, Any]) -> None:
    """An earlier send of the same refund (same tool, same arguments) whose answer was lost: it stays unknown."""

    def lost(call: Any) -> Any:
        raise TimeoutError("no response")

    write = {"tool": "refund", "kind": "write", "operation_id": f"refund-order-{args['order']}", "args": args}
    run = create_runner(budget=Budget(3, 3), store=store, task_id=task_id, execute=lost, verify=lambda c, r: None)
    assert run([write]).status is Status.NEEDS_RECONCILIATION


@pytest.fixture
def served(tmp_path: object) -> Iterator[tuple[SQLStore, str, str]]:
    url = f"sqlite:///{tmp_path}/decisions.db"
    store = SQLStore(url)
    with LiveServer(create_app(store, CONFIG)) as live:
        yield store, live.url, url
    store.close()


def console_page(base: str, path: str) -> str:
    with httpx.Client(base_url=base, timeout=30) as browser:
        form = browser.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        browser.post("/login", data={"token": SECRETS["ana"], "csrf_token": token.group(1), "next": "/"})
        return browser.get(path).text


def test_an_approver_is_told_the_calls_operation_is_already_unknown_in_the_api_cli_and_console(
    served: tuple[SQLStore, str, str],
) -> None:
    """The API said ``already_committed: null`` and nothing else; approving then ended the resume
    ``needs_reconciliation/unknown_commit``. Every view says so before the decision, and the resume does just that."""
    store, base, url = served
    pause_id = paused_task(store, "t-ask")  # waits for refund-order-40
    lost_refund(store, "t-first", {"order": 40, "note": "damaged", "api_key": PLANTED})  # the same send, lost
    with httpx.Client(base_url=base, timeout=30, headers=bearer("ana")) as api:
        (call,) = api.get("/api/v1/pauses").json()["pauses"][0]["pending_calls"]
        assert (call["operation_state"], call["already_committed"]) == ("unknown", None)
        assert "already has an unknown result" in call["already_unknown"]
        assert "needs_reconciliation/unknown_commit" in call["already_unknown"]
        assert "loopguard reconcile refund-order-40" in call["already_unknown"]
        (shown,) = api.get(f"/api/v1/pauses/{pause_id}").json()["pending_calls"]
        assert shown["already_unknown"] == call["already_unknown"]
    for command in (["pause", pause_id], ["pauses"], ["show", "t-ask"]):
        out = loopguard(*command, url=url).stdout
        assert f"note: {pause_id} call call-0: operation 'refund-order-40' already has an unknown result" in out
    for path in ("/", f"/pauses/{pause_id}", "/tasks/t-ask"):
        html = console_page(base, path)
        assert re.search(r'class="note note-error unknown" role="alert">Call <code>call-0</code>: operation', html)
        assert "needs_reconciliation/unknown_commit" in html, path
    decided = json.loads(loopguard("--json", "approve", pause_id, "--who", "ana", url=url).stdout)
    assert "note: call call-0: operation 'refund-order-40' already has an unknown result" in decided["message"]
    agent = Agent(name="clerk", model=ScriptedModel([[assistant_message("done")]]), tools=[refund])
    BODIES.clear()
    outcome = resume_guarded_sync(agent, pause_id, store=store, who="worker-2")
    assert (outcome.status, outcome.reason) == (Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT)
    assert BODIES == []  # what the note said: approving sent nothing


def test_a_committed_or_new_operation_carries_no_unknown_note(served: tuple[SQLStore, str, str]) -> None:
    store, base, _ = served
    paused_task(store, "t-new")
    with httpx.Client(base_url=base, timeout=30, headers=bearer("ana")) as api:
        (call,) = api.get("/api/v1/pauses").json()["pauses"][0]["pending_calls"]
    assert (call["operation_state"], call["already_unknown"], call["already_committed"]) == (None, None, None)
    assert "unknown result" not in console_page(base, "/")


def test_loopguard_pauses_shows_each_calls_arguments_redacted_as_stored(sql_url: str) -> None:
    """``loopguard pauses`` listed call ids and tools only: the approver could not see the amount or the order."""
    with SQLStore(sql_url) as store:
        pause = store.pause(paused_task(store, "t-args", note="box arrived crushed", calls=2))
    assert pause is not None
    listed = loopguard("pauses", url=sql_url).stdout
    header = next(line for line in listed.splitlines() if "arguments (redacted)" in line)
    assert header.index("calls") < header.index("arguments (redacted)")
    assert '"order":40' in listed and '"order":41' in listed and "box arrived crushed" in listed
    stored = "; ".join(str(call["arguments"]) for call in pause.pending_calls)  # as the store redacted them
    assert stored in listed and PLANTED not in listed


def test_reconcile_says_how_many_tasks_it_reopened_and_they_show_reopened_until_a_run_picks_them_up(
    sql_url: str,
) -> None:
    """``loopguard reconcile ... committed`` printed "task t-one reopened" when it reopened two tasks, and the
    reopened tasks showed as ``running`` although nothing ran them."""
    args = {"order": 40, "note": "damaged", "api_key": PLANTED}
    with SQLStore(sql_url) as store:
        lost_refund(store, "t-one", args)  # the send whose answer was lost
        lost_refund(store, "t-two", args)  # the same operation again: refused unknown_commit, waiting on it
        assert [store.task(t).status for t in ("t-one", "t-two")] == ["needs_reconciliation"] * 2  # type: ignore[union-attr]
    said = loopguard("reconcile", "refund-order-40", "committed", "--who", "ops", url=sql_url).stdout
    assert "2 tasks reopened (t-one, t-two)" in said and "task t-one reopened" not in said
    answer = json.loads(
        loopguard("--json", "reconcile", "refund-order-40", "committed", "--who", "ops", url=sql_url).stdout
    )
    assert answer["reopened_tasks"] == [] and "task t-one stays reopened" in answer["message"]  # a confirmation
    rows = json.loads(loopguard("--json", "tasks", url=sql_url).stdout)["tasks"]
    assert {r["task_id"]: r["status"] for r in rows} == {"t-one": "reopened", "t-two": "reopened"}
    listed = loopguard("tasks", "--status", "reopened", url=sql_url).stdout
    assert "t-one" in listed and "t-two" in listed
    shown = loopguard("show", "t-one", url=sql_url).stdout
    assert shown.startswith("task t-one: reopened")
    assert "reopened and not running" in shown
    with SQLStore(sql_url) as store:
        Guard(budget=Budget(3, 3), store=store, task_id="t-one")  # a run of the same task id opens it
        assert store.task("t-one").status == "running"  # type: ignore[union-attr]
    rows = json.loads(loopguard("--json", "tasks", url=sql_url).stdout)["tasks"]
    assert {r["task_id"]: r["status"] for r in rows} == {"t-one": "running", "t-two": "reopened"}
    assert "t-one" not in loopguard("tasks", "--status", "reopened", url=sql_url).stdout
    with SQLStore(sql_url) as store, LiveServer(create_app(store, CONFIG)) as live:
        with httpx.Client(base_url=live.url, timeout=30, headers=bearer("ana")) as api:
            assert api.get("/api/v1/tasks/t-two").json()["task"]["status"] == "reopened"
            assert [t["task_id"] for t in api.get("/api/v1/tasks?status=reopened").json()["tasks"]] == ["t-two"]
        page = console_page(live.url, "/tasks?status=reopened")
        assert "t-two" in page and '<span class="badge status-reopened">reopened</span>' in page
