"""What only the SQL store has: its URL, its schema version, SQLite's settings, and what reaches the disk."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agents_loopguard import Budget, Guard, Reason, Status, create_runner
from agents_loopguard.store import OperationState, SQLStore, StoreError
from agents_loopguard.store.sql import DEFAULT_URL, ENV_URL, SCHEMA_VERSION, database_url
from agents_loopguard.values.calls import Ticket
from tests.conftest import libpq_url
from tests.support.store_trace import sent

pytestmark = pytest.mark.timeout(60)

BIG = Budget(model_turns=100, tool_executions=100)


def sql_rows(store: SQLStore, query: str) -> list[Any]:
    """Rows of a read-only query on the store's own database."""
    with store.engine.connect() as conn:
        return list(conn.exec_driver_sql(query).all())


# --- schema ---------------------------------------------------------------------------------------------------------


def test_the_schema_is_created_on_first_use_with_its_version(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        store.ensure_task("t", BIG)
        assert sql_rows(store, "SELECT value FROM loopguard_meta WHERE key = 'schema_version'") == [
            (str(SCHEMA_VERSION),)
        ]
        tables = {name for (name,) in sql_rows(store, _TABLES[store.backend])}
        assert {
            "loopguard_tasks",
            "loopguard_operations",
            "loopguard_trace",
            "loopguard_repetitions",
            "loopguard_seen",
            "loopguard_activations",
            "loopguard_pauses",
            "loopguard_transitions",
            "loopguard_meta",
        } <= tables
    with SQLStore(sql_url) as again:  # an existing database of this version is used as it is
        assert again.task("t") is not None


_TABLES = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table'",
    # current_schema(): the test's own schema, from the URL's search_path
    "postgresql": "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
}


def test_a_database_of_another_schema_version_is_refused_with_what_to_do(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        store.ensure_task("t", BIG)
        with store.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE loopguard_meta SET value = '999' WHERE key = 'schema_version'")
    with SQLStore(sql_url) as newer, pytest.raises(StoreError) as err:
        newer.task("t")
    message = str(err.value)
    assert "schema version 999" in message and f"uses version {SCHEMA_VERSION}" in message
    assert "new database" in message and ENV_URL in message


def test_many_stores_can_open_a_new_database_at_once(sql_url: str) -> None:
    errors: list[BaseException] = []
    stores = [SQLStore(sql_url) for _ in range(4)]
    start = threading.Barrier(len(stores))

    def first_use(store: SQLStore, n: int) -> None:
        try:
            start.wait()
            store.ensure_task(f"t{n}", BIG)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_use, args=(s, n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(t.task_id for t in stores[0].tasks()) == ["t0", "t1", "t2", "t3"]
    for store in stores:
        store.close()


# --- the URL --------------------------------------------------------------------------------------------------------


def test_the_url_comes_from_the_argument_then_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_db = tmp_path / "from-env" / "lg.db"
    monkeypatch.setenv(ENV_URL, f"sqlite:///{env_db}")
    with SQLStore() as store:
        store.ensure_task("t", BIG)
        assert store.url.database == str(env_db)
    assert env_db.exists()  # the missing folder was created
    explicit = tmp_path / "explicit.db"
    with SQLStore(f"sqlite:///{explicit}") as store:
        assert store.url.database == str(explicit)


def test_the_default_is_a_sqlite_file_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.chdir(tmp_path)
    assert DEFAULT_URL == "sqlite:///.loopguard/loopguard.db"
    with SQLStore() as store:
        store.ensure_task("t", BIG)
    assert (tmp_path / ".loopguard" / "loopguard.db").is_file()


@pytest.mark.parametrize(
    "url,problem",
    [
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("postgresql+psycopg2://u@h/db", "psycopg 3"),
        ("mysql://u@h/db", "unsupported"),
        ("not a url", "cannot parse"),
    ],
)
def test_urls_the_store_cannot_use_are_refused_with_a_reason(url: str, problem: str) -> None:
    with pytest.raises(StoreError, match=problem):
        database_url(url)


def test_postgres_urls_use_psycopg_3() -> None:
    assert database_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert database_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert "secret" not in repr(SQLStore("postgresql+psycopg://u:secret@127.0.0.1:1/db"))


# --- SQLite settings -------------------------------------------------------------------------------------------------


def test_sqlite_runs_in_wal_mode_fsyncing_the_steps_that_protect_writes(tmp_path: Path) -> None:
    with SQLStore(f"sqlite:///{tmp_path / 'lg.db'}") as store:
        store.ensure_task("t", BIG)
        cur = store._cursor()
        assert cur.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.synchronous == "WRITES"  # default: durable steps go to FULL (tests/test_store_durability.py)
        assert cur.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL between them
    with SQLStore(f"sqlite:///{tmp_path / 'full.db'}?synchronous=full") as full:
        assert full._cursor().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL for every commit
    with SQLStore(f"sqlite:///{tmp_path / 'fast.db'}?synchronous=normal") as fast:
        assert fast._cursor().execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert "synchronous" not in str(fast.url)
    with pytest.raises(StoreError, match="synchronous='OFF'"):
        SQLStore(f"sqlite:///{tmp_path / 'x.db'}?synchronous=off")


def test_a_busy_database_makes_a_step_wait_instead_of_failing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    with SQLStore(url) as store:
        store.ensure_task("t", BIG)
        with SQLStore(url) as other:
            locker = other._cursor()
            locker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock for a moment
            release = threading.Timer(0.5, lambda: locker.execute("COMMIT"))
            release.start()
            try:
                assert store.reserve_turn("t").granted  # waited for the lock, then went through
            finally:
                release.join()
        assert store.task("t").used.models == 1  # type: ignore[union-attr]


# --- what reaches the disk --------------------------------------------------------------------------------------------

REGISTERED = "REGISTERED-SECRET-4242"
SECRETS = [
    "AKIA-KEYVALUE-7731",  # under api_key
    "tok.SECRETBEARER.9f8e",  # Authorization: Bearer ...
    "ey.INLINEBEARER.abc",  # a bearer token inside free text
    "hunter2-PASSWORD-991",  # under password
    REGISTERED,  # a value the application registered as secret
    "RESULT-TOKEN-5151",  # under token, in a result
    "sk-resultkey0123456789",  # an sk- key inside a result's text
]
VISIBLE = "order-4711-visible"  # a plain value that must reach the database (proves the scan can see text)


def plant_secrets(store: SQLStore) -> None:
    """Run real guarded calls whose arguments, results and errors carry every secret above."""
    args = {
        "order": VISIBLE,
        "api_key": SECRETS[0],
        "headers": {"Authorization": f"Bearer {SECRETS[1]}"},
        "note": f"retry with Bearer {SECRETS[2]} please",
        "password": SECRETS[3],
        "comment": f"the customer said {REGISTERED} twice",
    }
    result = {
        "status": "ok",
        "token": SECRETS[5],
        "echo": f"used {SECRETS[6]} and {REGISTERED}",
        "order": VISIBLE,
    }
    run = create_runner(
        budget=BIG,
        store=store,
        now=lambda: 1.0,
        execute=lambda call: result,
        verify=lambda call, res: {
            "revision": 2 if call["kind"] == "write" else 1,
            "done": call["kind"] == "write",
            "effect": "committed" if call["kind"] == "write" else "none",
        },
        secrets=[REGISTERED],
        task_id="secrets-run",
    )
    read = {"tool": "lookup", "kind": "read", "args": args}
    write = {"tool": "charge", "kind": "write", "operation_id": f"{VISIBLE}-charge", "args": args}
    outcome = run([read, write])
    assert outcome.status is Status.COMPLETED

    guard = Guard(budget=BIG, store=store, task_id="secrets-failure", secrets=[REGISTERED])
    ticket = guard.authorize({"tool": "charge", "kind": "write", "operation_id": f"{VISIBLE}-2", "args": args})
    assert isinstance(ticket, Ticket)
    error = RuntimeError(f"gateway said password={SECRETS[3]} for {REGISTERED}")
    failed = guard.end(guard.fail(ticket, error))
    assert failed.reason is Reason.EXECUTOR_EXCEPTION
    assert store.lookup_operation(f"{VISIBLE}-charge").state is OperationState.COMMITTED  # type: ignore[union-attr]


def assert_no_secret_in(blob: bytes, where: str) -> None:
    assert VISIBLE.encode() in blob, f"{where}: the scan does not see the stored text at all"
    leaked = [s for s in SECRETS if s.encode() in blob]
    assert leaked == [], f"{where} holds secrets: {leaked}"


def test_no_secret_reaches_the_sqlite_file_or_its_wal(tmp_path: Path) -> None:
    db = tmp_path / "lg.db"
    store = SQLStore(f"sqlite:///{db}")
    plant_secrets(store)
    files = [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]
    assert Path(f"{db}-wal") in files  # the recent commits are still in the write-ahead log
    assert_no_secret_in(b"".join(p.read_bytes() for p in files), "the SQLite files (db, -wal, -shm)")
    store.close()  # the last connection checkpoints the log into the database file
    assert_no_secret_in(db.read_bytes(), "the SQLite database after checkpoint")


@pytest.mark.postgres
def test_no_secret_reaches_any_postgresql_table(pg_schema_url: str) -> None:
    with SQLStore(pg_schema_url) as store:
        plant_secrets(store)
    with psycopg.connect(libpq_url(pg_schema_url)) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        ]
        assert "loopguard_trace" in tables and "loopguard_operations" in tables
        dump = "\n".join(
            str(row[0]) for name in tables for row in conn.execute(f'SELECT t::text FROM "{name}" t').fetchall()
        )
    assert_no_secret_in(dump.encode(), "the PostgreSQL tables")


# --- many threads, one store -----------------------------------------------------------------------------------------


def test_threads_sharing_one_store_never_exceed_the_budget(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        store.ensure_task("t", Budget(model_turns=0, tool_executions=25))
        granted: list[int] = []
        lock = threading.Lock()
        start = threading.Barrier(6)

        def worker(n: int) -> None:
            start.wait()
            for i in range(20):
                grant = store.reserve_execution("t", f"fp-{n}-{i}", max_repeats=2)
                if grant.granted:
                    with lock:
                        granted.append(grant.used.tools)
                else:
                    assert grant.reason is Reason.TOOL_BUDGET

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(granted) == list(range(1, 26))  # each unit of the budget granted exactly once
        assert store.task("t").used.tools == 25  # type: ignore[union-attr]


def test_the_ledger_survives_the_process_that_wrote_it(sql_url: str) -> None:
    calls: list[Any] = []

    def run(store: SQLStore) -> Any:
        return create_runner(
            budget=BIG,
            store=store,
            now=lambda: 0,
            execute=lambda call: calls.append(call) or {"status": "ok", "receipt": "r-1"},
            verify=lambda call, result: {"revision": 1, "done": True, "effect": "committed"},
        )([{"tool": "confirm", "kind": "write", "operation_id": "order-42-v3", "args": {"order": 42}}])

    with SQLStore(sql_url) as first:
        assert run(first).status is Status.COMPLETED
    with SQLStore(sql_url) as second:  # a new store: nothing is cached in memory
        replayed = run(second)
    assert len(calls) == 1 and replayed.value == {"status": "ok", "receipt": "r-1"}


def test_credentials_assigned_in_free_text_are_redacted() -> None:
    from agents_loopguard.values.canonical import redact

    text = 'login failed: password="hunter2" host=db; access_token=abc&page=2 api_key=zz'
    assert (
        redact(text) == 'login failed: password="[redacted]" host=db; access_token=[redacted]&page=2 api_key=[redacted]'
    )
    assert redact("passwords=3 tokens=4 and a token") == "passwords=3 tokens=4 and a token"


# --- what a guarded call costs the database -------------------------------------------------------------------------


def test_a_guarded_read_costs_one_store_step_and_a_write_two(sql_url: str) -> None:
    with SQLStore(sql_url) as store:
        guard = Guard(budget=BIG, store=store, task_id="cost")
        n = iter(range(1, 100))

        def guarded(kind: str) -> None:
            i = next(n)
            call: dict[str, Any] = {"tool": "t", "kind": kind, "args": {"i": i}}
            if kind == "write":
                call["operation_id"] = f"op-{i}"
            ticket = guard.authorize(call)
            assert isinstance(ticket, Ticket)
            effect = "committed" if kind == "write" else "none"
            verify = lambda c, r: {"revision": i, "done": False, "effect": effect}  # noqa: E731
            assert guard.settle(ticket, {"status": "ok"}, verify) is None

        guarded("read")  # warm: connection and schema
        for kind, steps in (("read", 1), ("write", 2)):  # a read's result rides with the next step
            messages = sent(store, lambda kind=kind: guarded(kind))
            if store.backend == "sqlite":
                # each transaction takes the write lock up front and commits once
                assert [s for s in messages if s in ("BEGIN IMMEDIATE", "COMMIT")] == [
                    "BEGIN IMMEDIATE",
                    "COMMIT",
                ] * steps
            else:
                syncs = messages.count("Sync") + messages.count("Query")
                assert syncs == steps, (kind, messages)  # goals: read <= 2, write <= 3


def test_an_unreachable_database_is_a_store_error_without_the_password() -> None:
    store = SQLStore("postgresql+psycopg://lg:hunter2@127.0.0.1:1/none?connect_timeout=2")
    with pytest.raises(StoreError, match="cannot connect") as err:
        store.task("t")
    assert "hunter2" not in str(err.value)
