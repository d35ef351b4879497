"""R22 operations over time: every operator view pages in the store (CLI, API, console) and reads an index, the
metrics come from bounded tallies with a bounded label set, the server reaches the store only through the
operations layer, and an operator command loads no agent framework."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from agents_loopguard import Budget, Guard, Reason, Status, Store
from agents_loopguard import cli as command
from agents_loopguard.ops import pages
from agents_loopguard.ops.measures import measures
from agents_loopguard.server import ServerConfig, Tokens, create_app
from agents_loopguard.server.metrics import StoreCollector, exposition
from agents_loopguard.store.queries import TaskQuery
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.errors import InputError
from tests.support.bulk import fill, shape
from tests.support.live_server import LiveServer
from tests.support.server_env import SECRETS, lost_write, paused_task

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agents_loopguard"
GENERATED = 100_000
TOKENS = Tokens.parse(f"ana:operator:{SECRETS['ana']}")
ANA = {"Authorization": f"Bearer {SECRETS['ana']}"}


# --- the pages, on every backend ----------------------------------------------------------------------------------


def _tasks(store: Store, count: int) -> None:
    for n in range(count):
        guard = Guard(budget=Budget(3, 3), store=store, task_id=f"order-{n}", clock=lambda n=n: 1000.0 + n)
        guard.begin_turn()
        if n % 3 == 0:
            guard.finish(Status.STOPPED, Reason.SAME_CALL)


def test_r22_task_pages_follow_each_other_without_gaps_or_repeats_with_every_filter(store: Store) -> None:
    _tasks(store, 23)
    Guard(budget=Budget(3, 3), store=store, task_id=str(uuid.uuid4()), clock=lambda: 2000.0, family="refunds")
    seen: list[str] = []
    cursor = None
    while True:
        page = pages.task_page(store, limit=5, cursor=cursor)
        seen += [r["task_id"] for r in page["tasks"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert len(seen) == 24 == len(set(seen)) and seen[1:] == [f"order-{n}" for n in range(22, -1, -1)]
    assert [r["task_id"] for r in pages.task_page(store, status="stopped", limit=3)["tasks"]] == [
        "order-21",
        "order-18",
        "order-15",
    ]
    assert len(pages.task_page(store, reason="same_call", limit=100)["tasks"]) == 8
    assert [r["family"] for r in pages.task_page(store, family="refunds")["tasks"]] == ["refunds"]
    assert [r["task_id"] for r in pages.task_page(store, prefix="order-2")["tasks"]] == [
        "order-22",
        "order-21",
        "order-20",
        "order-2",
    ]
    window = pages.task_page(store, updated_after=1009.5, updated_before=1012.5)["tasks"]
    assert [r["task_id"] for r in window] == ["order-12", "order-11", "order-10"]
    assert pages.task_page(store, prefix="ORDER-")["tasks"] == [], "a prefix is exact, case and all"
    with pytest.raises(InputError, match="cursor"):
        pages.task_page(store, cursor="bm90LWEtY3Vyc29y")


def test_r22_the_other_lists_page_too(store: Store) -> None:
    for n in range(4):
        lost_write(store, f"pay-{n}", f"inv-{n}")
        paused_task(store, f"ticket-{n}")
    unknown = pages.operation_page(store, state="unknown", limit=3)
    assert len(unknown["operations"]) == 3 and unknown["next"]
    rest = pages.operation_page(store, state="unknown", limit=3, cursor=unknown["next"])
    assert len(rest["operations"]) == 1 and rest["next"] is None
    assert {o["operation_id"] for o in unknown["operations"] + rest["operations"]} == {f"inv-{n}" for n in range(4)}
    waiting = pages.pause_page(store, limit=3)
    more = pages.pause_page(store, limit=3, cursor=waiting["next"])
    assert [p["task_id"] for p in waiting["pauses"] + more["pauses"]] == [f"ticket-{n}" for n in range(4)]
    store.set_stop_mark("pay-0", "audit", who="ana", now=5.0)
    assert [t["kind"] for t in pages.transition_page(store)["transitions"]] == ["stop"]
    store.ensure_task("long", Budget(50, 50))
    for _ in range(30):
        store.reserve_turn("long")
    first = pages.timeline_page(store, "long", limit=20)
    assert first["total"] == 30 and [s["seq"] for s in first["timeline"]] == list(range(11, 31))
    earlier = pages.timeline_page(store, "long", limit=20, cursor=first["next"])
    assert [s["seq"] for s in earlier["timeline"]] == list(range(1, 11)) and earlier["next"] is None


def test_r22_tallies_agree_with_a_read_of_every_task(store: Store) -> None:
    _tasks(store, 12)
    lost_write(store, "pay-1", "inv-1")
    paused_task(store, "ticket-1")
    store.recover("order-0", who="lead", why="one more", now=9.0)  # ended, then running again
    tallies = store.tallies()
    counted: dict[tuple[str, str, str], int] = {}
    for task in store.tasks():
        reason = "" if task.status == "running" else str((task.outcome or {}).get("reason") or "")
        counted[(task.family, task.status, reason)] = counted.get((task.family, task.status, reason), 0) + 1
    assert {(g.family, g.status, g.reason): g.tasks for g in tallies.tasks} == counted
    assert tallies.refusals == ()  # finish() refuses nothing; the same_call loop below does
    assert (tallies.pending_pauses, tallies.unknown_operations) == (1, 1)


# --- labels -------------------------------------------------------------------------------------------------------


def test_r22_ten_thousand_uuid_task_ids_are_one_family_and_an_email_is_never_a_label() -> None:
    store = SQLStore(f"sqlite:///{Path(__import__('tempfile').mkdtemp()) / 'lg.db'}")
    try:
        for _ in range(10_000):
            store.ensure_task(str(uuid.uuid4()), Budget(1, 1))
        for n in range(50):
            store.ensure_task(f"ticket-{n}", Budget(1, 1))
        store.ensure_task("alice.smith@example.com", Budget(1, 1))
        store.ensure_task("refund for Bob Jones", Budget(1, 1))
        text = exposition(StoreCollector(store))
    finally:
        store.close()
    families = {
        s.labels["family"] for f in text_string_to_metric_families(text) for s in f.samples if "family" in s.labels
    }
    assert families == {"id", "ticket", "other"}
    assert "alice" not in text and "example.com" not in text and "Bob" not in text


def test_r22_families_beyond_the_largest_are_summed_as_other(store: Store) -> None:
    for n in range(30):
        for k in range(n + 1):
            store.ensure_task(f"kind{chr(97 + n % 26)}{n}-{k}", Budget(1, 1), family=f"f{n:02d}")
    figures = measures(store, max_families=5)
    families = {g["family"] for g in figures["tasks"]}
    assert families == {"f29", "f28", "f27", "f26", "other"}
    assert sum(g["tasks"] for g in figures["tasks"]) == sum(range(1, 31))
    with pytest.raises(InputError, match="not a family name"):
        store.ensure_task("x", Budget(1, 1), family="Alice Smith")


def test_r22_a_run_names_its_family_through_run_options() -> None:
    from agents_loopguard.run import RunOptions
    from agents_loopguard.run.guarded import GuardedRun

    store = SQLStore(f"sqlite:///{Path(__import__('tempfile').mkdtemp()) / 'lg.db'}")
    run = GuardedRun.start(RunOptions(budget=Budget(2, 2), store=store, task_id="3f2a9c1b0e4d", family="refunds"))
    assert store.task(run.guard.task_id).family == "refunds"  # type: ignore[union-attr]
    store.close()


# --- the server reaches the store only through the operations layer ----------------------------------------------


def test_r22_no_server_module_calls_a_store_method() -> None:
    """Issue 31: ``server/metrics.py`` called ``.store.trace(...)``; the server is above the operations layer."""
    from agents_loopguard.store.base import Store as StoreClass

    methods = {name for name in dir(StoreClass) if not name.startswith("_")}
    found = []
    for path in sorted((PACKAGE / "server").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods:
                owner = ast.unparse(node.func.value)
                if "store" in owner.lower():
                    found.append(f"{path.name}: {ast.unparse(node)}")
    assert found == []


class Watched:
    """A store that records which modules call it (the caller's frame): the server must never be one of them."""

    def __init__(self, store: Store) -> None:
        self._store, self.callers = store, set[str]()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self.callers.add(str(sys._getframe(1).f_globals.get("__name__")))
            return found(*args, **kwargs)

        return call


def test_r22_every_server_route_reaches_the_store_through_ops_only(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        lost_write(store, "pay-1", "inv-1")
        pause = paused_task(store, "ticket-1")
        watched = Watched(store)
        app = create_app(watched, ServerConfig(tokens=TOKENS))  # type: ignore[arg-type]
        with LiveServer(app) as live:
            for path in (
                "/api/v1/tasks",
                "/api/v1/tasks/pay-1",
                "/api/v1/operations",
                "/api/v1/operations/inv-1",
                "/api/v1/transitions",
                "/api/v1/pauses",
                f"/api/v1/pauses/{pause}",
                "/metrics",
            ):
                answer = httpx.get(f"{live.url}{path}", headers=ANA, timeout=30)
                assert answer.status_code == 200, (path, answer.text)
        assert watched.callers, "the routes read the store"
        assert not {c for c in watched.callers if c.startswith("agents_loopguard.server")}, watched.callers


# --- an operator command starts without the agent stack ----------------------------------------------------------


def test_r22_the_operator_command_imports_no_agent_framework_or_model_client(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    with SQLStore(url) as store:
        store.tasks()  # an empty store
    probe = (
        "import sys\nfrom agents_loopguard.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as done:\n    code = done.code\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'openai', 'agents', 'langchain', 'langgraph', "
        "'google', 'dbos', 'temporalio', 'restate', 'httpx'})\nprint(code, heavy, file=sys.stderr)"
    )
    for args in (["--help"], ["--db", url, "tasks"], ["--db", url, "pauses"], ["--db", url, "prune", "--dry-run"]):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT)
        assert done.stderr.strip().splitlines()[-1] == "0 []", (args, done.stderr)


# --- a hundred thousand generated tasks, paged in the CLI, the API and the console -------------------------------


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('big') / 'lg.db'}"
    fill(url, GENERATED, calls=1, start=1_700_000_000.0, days=90)
    yield url


def _expected(count: int, keep: Any = lambda s: True) -> list[str]:
    return [shape(i).task_id for i in range(count - 1, -1, -1) if keep(shape(i))]


@pytest.mark.timeout(900)
def test_r22_the_api_pages_through_every_one_of_100000_tasks(big_store: str) -> None:
    with (
        SQLStore(big_store, readonly=True) as store,
        LiveServer(create_app(store, ServerConfig(tokens=TOKENS))) as live,
    ):
        seen: list[str] = []
        params: dict[str, Any] = {"limit": 1000}
        with httpx.Client(base_url=live.url, headers=ANA, timeout=60) as client:
            while True:
                page = client.get("/api/v1/tasks", params=params).json()
                seen += [r["task_id"] for r in page["tasks"]]
                if page["next"] is None:
                    break
                params["cursor"] = page["next"]
            stopped = client.get("/api/v1/tasks", params={"status": "stopped", "family": "order", "limit": 7}).json()
    assert seen == _expected(GENERATED)
    wanted = _expected(GENERATED, lambda s: s.status == "stopped" and s.family == "order")[:7]
    assert [r["task_id"] for r in stopped["tasks"]] == wanted


@pytest.mark.timeout(900)
def test_r22_the_cli_pages_through_a_family_of_10000_tasks(big_store: str) -> None:
    runner, seen, cursor = CliRunner(), list[str](), None
    while True:
        args = ["--db", big_store, "--json", "tasks", "--family", "order", "--limit", "1000"]
        done = runner.invoke(command.app, [*args, *(["--cursor", cursor] if cursor else [])])
        assert done.exit_code == 0, done.output
        page = json.loads(done.output)
        seen += [r["task_id"] for r in page["tasks"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == _expected(GENERATED, lambda s: s.family == "order")


@pytest.mark.timeout(900)
def test_r22_the_console_follows_next_page_through_a_prefix(big_store: str) -> None:
    from tests.test_server_console import log_in

    with (
        SQLStore(big_store, readonly=True) as store,
        LiveServer(create_app(store, ServerConfig(tokens=TOKENS))) as live,
        httpx.Client(base_url=live.url, timeout=60) as browser,
    ):
        log_in(browser)
        seen: list[str] = []
        path = "/tasks?prefix=order-99"
        while path:
            html = browser.get(path).text
            seen += [line.split(">")[1].split("<")[0] for line in html.split('<td><a href="/tasks/')[1:]]
            following = html.split('rel="next"')[0].rsplit('href="', 1)[-1] if 'rel="next"' in html else ""
            path = following.split('"')[0].replace("&amp;", "&")
    assert seen == _expected(GENERATED, lambda s: s.task_id.startswith("order-99"))


def test_r22_every_page_reads_an_index_and_sorts_nothing(big_store: str) -> None:
    """SQLite's plan for each page: an index search, never a full scan nor a sort of the matching rows."""
    with SQLStore(big_store, readonly=True) as store:
        queries = [
            TaskQuery(limit=21),
            TaskQuery(status="stopped", limit=21),
            TaskQuery(reason="same_call", limit=21),
            TaskQuery(family="order", after=(1_700_000_500.0, "ticket-5"), limit=21),
        ]
        for query in queries:
            store.task_page(query)
        cur = store._cursor()
        for key, stmt in store.__dict__["_query_cache"].items():
            if key[0] != "tasks":
                continue
            params = {"status": "x", "reason": "x", "family": "x", "limit": 21, "after_at": 0.0, "after_id": ""}
            found = cur.execute("EXPLAIN QUERY PLAN " + stmt.sql, stmt.params(params)).fetchall()
            plan = " | ".join(row[3] for row in found)
            assert "USING INDEX" in plan and "TEMP B-TREE" not in plan, (key, plan)
