"""R18 (scopes and audit): every operator decision keeps who, why and when, redacted like the trace, and every view
(CLI, ``--json``, the API, the console) shows them; a pause says when its write is already committed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from agents import Agent
from agents.testing import ScriptedModel

from agents_loopguard import Budget, Guard, Status, create_runner
from agents_loopguard.ops.approvals import decide, pause_digest
from agents_loopguard.sdk import resume_guarded_sync
from agents_loopguard.server import create_app
from agents_loopguard.store.base import Store
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.errors import StateError
from tests.support.live_server import LiveServer
from tests.support.server_env import CONFIG, PLANTED, SECRETS, bearer, paused_task, refund
from tests.test_cli import loopguard

NOTE = "stock is low"


def a_pause(store: Store, task_id: str = "t-audit") -> str:
    Guard(budget=Budget(5, 5), store=store, task_id=task_id)
    calls = [{"call_id": "c1", "tool": "pay", "arguments": "{}", "operation_id": f"{task_id}-pay"}]
    store.save_pause(task_id, "p-audit", "{}", calls, digest=pause_digest(task_id, "{}", calls), outcome={})
    return "p-audit"


def test_r18_the_store_keeps_the_deciders_note_and_time(store_factory: Callable[[], Store]) -> None:
    """R18 (scopes and audit): decide_pause keeps why and when, on every backend, across a reopened store."""
    store = store_factory()
    pause_id = a_pause(store)
    decide(store, pause_id, who="ana", approve_all=True, why=f"{NOTE}; api_key={PLANTED}", now=1_700_000_000.5)
    reopened = store_factory().pause(pause_id)
    assert reopened is not None and reopened.status == "decided"
    assert (reopened.decided_by, reopened.decided_at) == ("ana", 1_700_000_000.5)
    assert reopened.decided_why.startswith(NOTE) and PLANTED not in reopened.decided_why  # redacted like the trace


def test_r18_a_decided_pause_credits_each_name_with_its_own_act(store_factory: Callable[[], Store]) -> None:
    """R18 (scopes and audit): a refused second decision names the decider and the resumer apart."""
    store = store_factory()
    pause_id = a_pause(store)
    decide(store, pause_id, who="ana", approve_all=True)
    with pytest.raises(StateError, match="is decided by 'ana'"):
        decide(store, pause_id, who="bob", approve_all=True)
    store.claim_pause(pause_id, who="worker-7")
    with pytest.raises(StateError, match=r"is resumed by 'worker-7' \(decided by 'ana'\)"):
        decide(store, pause_id, who="bob", approve_all=True)


def _committed_first(store: Store, operation_id: str) -> None:
    """Another task commits the operation the pause is about to ask for."""
    run = create_runner(
        budget=Budget(2, 2),
        store=store,
        task_id="t-first",
        execute=lambda call: {"status": "ok"},
        verify=lambda call, result: {"revision": 1, "done": True, "effect": "committed"},
    )
    write = {"tool": "refund", "kind": "write", "operation_id": operation_id, "args": {"order": 40}}
    assert run([write]).status is Status.COMPLETED


def test_r18_cli_show_json_and_pause_show_who_why_when_and_the_resumer_apart(sql_url: str) -> None:
    """R18 (scopes and audit): `loopguard approve --why` is kept; show, pause and --json show who, why, when; the
    resumer is not credited with the decision; a call whose operation is committed says so."""
    with SQLStore(sql_url) as store:
        pause_id = paused_task(store, "t-cli")
        _committed_first(store, "refund-order-40")
    shown = loopguard("pause", pause_id, url=sql_url).stdout
    assert "refund-order-40' is already committed" in shown and "approving runs nothing" in shown
    loopguard("approve", pause_id, "--who", "me", "--why", NOTE, url=sql_url)
    view = json.loads(loopguard("--json", "show", "t-cli", url=sql_url).stdout)
    (pause,) = view["pauses"]
    assert (pause["decided_by"], pause["decided_why"], pause["resumed_by"]) == ("me", NOTE, None)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", pause["decided_at"])
    human = loopguard("pause", pause_id, url=sql_url).stdout
    assert f"decided by me at {pause['decided_at']}: {NOTE}" in human
    with SQLStore(sql_url) as store:
        agent = Agent(name="clerk", model=ScriptedModel([]), tools=[refund])
        resume_guarded_sync(agent, pause_id, store=store, who="worker-7")
    table = loopguard("show", "t-cli", url=sql_url).stdout
    header = next(line for line in table.splitlines() if "decided by" in line)
    row = next(line for line in table.splitlines() if line.startswith(pause_id))
    columns = {name: header.index(name) for name in ("decided by", "why", "resumed by")}
    assert row[columns["decided by"] :].startswith("me") and row[columns["resumed by"] :].startswith("worker-7")
    assert row[columns["why"] :].startswith(NOTE)
    again = loopguard("approve", pause_id, "--who", "bob", url=sql_url, check=False)
    assert "resumed by 'worker-7' (decided by 'me')" in again.stderr


@pytest.fixture
def served(tmp_path: object) -> Iterator[tuple[SQLStore, str]]:
    store = SQLStore(f"sqlite:///{tmp_path}/audit.db")
    with LiveServer(create_app(store, CONFIG)) as live:
        yield store, live.url
    store.close()


def test_r18_the_api_and_the_console_show_the_decision_note_and_time(served: tuple[SQLStore, str]) -> None:
    """R18 (scopes and audit): the API's decision keeps why; the pause and task pages show who, why and when."""
    store, url = served
    pause_id = paused_task(store, "t-api")
    _committed_first(store, "refund-order-40")
    with httpx.Client(base_url=url, timeout=30, headers=bearer("ana")) as api:
        pending = api.get("/api/v1/pauses").json()["pauses"]
        assert "already committed" in pending[0]["pending_calls"][0]["already_committed"]
        body = {"decision": "approve", "why": f"<b>{NOTE}</b> token={PLANTED}"}
        decided = api.post(f"/api/v1/pauses/{pause_id}/decisions", json=body)
        assert decided.status_code == 200, decided.text
        view = api.get(f"/api/v1/pauses/{pause_id}").json()
    assert view["decided_by"] == "ana" and view["decided_why"].startswith(f"<b>{NOTE}</b>")
    assert PLANTED not in json.dumps(view) and view["decided_at"]
    with httpx.Client(base_url=url, timeout=30) as browser:
        form = browser.get("/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        browser.post("/login", data={"token": SECRETS["ana"], "csrf_token": token.group(1), "next": "/"})
        page = browser.get(f"/pauses/{pause_id}").text
        task_page = browser.get("/tasks/t-api").text
    for html in (page, task_page):
        assert f"&lt;b&gt;{NOTE}&lt;/b&gt;" in html and PLANTED not in html  # shown as text, redacted
        assert f'datetime="{view["decided_at"]}"' in html
    assert "decided by <b>ana</b>" in page


def _keeps(record: dict[str, Any], who: str, why: str) -> None:
    assert (record["who"], record["why"]) == (who, why) and record["at"]


def test_r18_stop_reconcile_and_recover_keep_who_why_and_when(served: tuple[SQLStore, str]) -> None:
    """R18 (scopes and audit): each operator act through the API is a transition with who, why and when."""
    from tests.support.server_env import budget_stopped, lost_write

    store, url = served
    lost_write(store, "t-lost", "pay-9")
    budget_stopped(store, "t-stopped")
    Guard(budget=Budget(3, 3), store=store, task_id="t-running")
    with httpx.Client(base_url=url, timeout=30, headers=bearer("bob")) as api:
        assert api.post("/api/v1/tasks/t-running/stop", json={"reason": "runaway"}).status_code == 200
        answer = {"answer": "committed", "why": "the bank shows it", "result": {"ok": True}}
        assert api.post("/api/v1/operations/pay-9/reconcile", json=answer).status_code == 200
        recover = {"why": "one more try", "more_turns": 1}
        assert api.post("/api/v1/tasks/t-stopped/recover", json=recover).status_code == 200
        kinds = {
            t["kind"]: t
            for task in ("t-running", "t-lost", "t-stopped")
            for t in api.get(f"/api/v1/tasks/{task}").json()["transitions"]
        }
    _keeps(kinds["stop"], "bob", "runaway")
    _keeps(kinds["reconcile"], "bob", "the bank shows it")
    _keeps(kinds["recover"], "bob", "one more try")
