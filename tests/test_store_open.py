"""What a store does with the database it is given: only readers that change nothing, only empty databases
initialized, never a foreign database stamped, and read-only files still readable."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from agents_loopguard import Budget, Guard
from agents_loopguard.store import SQLStore, StoreError
from agents_loopguard.values.errors import NotFoundError
from tests.conftest import libpq_url
from tests.support.unprivileged import run_unprivileged, shared_folder

pytestmark = pytest.mark.timeout(60)

BIG = Budget(model_turns=100, tool_executions=100)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("options", [{"create": False}, {"readonly": True}])
def test_a_missing_file_is_no_loopguard_store_and_nothing_is_created(tmp_path: Path, options: dict) -> None:
    missing = tmp_path / "typo" / "lg.db"
    with pytest.raises(NotFoundError) as err:
        SQLStore(f"sqlite:///{missing}", **options)
    assert str(err.value) == f"no loopguard store at {missing}"
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("options", [{"create": False}, {"readonly": True}])
def test_an_empty_file_is_no_loopguard_store_and_stays_empty(tmp_path: Path, options: dict) -> None:
    empty = tmp_path / "lg.db"
    empty.touch()
    with SQLStore(f"sqlite:///{empty}", **options) as store, pytest.raises(NotFoundError, match="no loopguard store"):
        store.tasks()
    assert empty.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lg.db"]


def unrelated_database(path: Path, *, loopguard_like: bool = False) -> None:
    """An application's SQLite file (rollback journal), or one with a loopguard table but no loopguard_meta."""
    conn = sqlite3.connect(path)
    if loopguard_like:
        conn.execute("CREATE TABLE loopguard_tasks (task_id TEXT PRIMARY KEY, model_turns INTEGER)")
        conn.execute("INSERT INTO loopguard_tasks VALUES ('old', 3)")
    else:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers VALUES (1, 'Ada')")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("options", [{}, {"create": False}, {"readonly": True}])
@pytest.mark.parametrize("loopguard_like", [False, True], ids=["app-tables", "tables-without-meta"])
def test_a_database_with_other_tables_is_refused_and_left_as_it_was(
    tmp_path: Path, options: dict, loopguard_like: bool
) -> None:
    path = tmp_path / "app.db"
    unrelated_database(path, loopguard_like=loopguard_like)
    before = digest(path)
    with SQLStore(f"sqlite:///{path}", **options) as store, pytest.raises(StoreError) as err:
        store.ensure_task("t", BIG) if not options else store.tasks()
    message = str(err.value)
    assert "is not a loopguard store" in message and "no loopguard_meta" in message and "nothing was changed" in message
    assert ("loopguard_tasks" if loopguard_like else "customers") in message
    assert digest(path) == before
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # not even switched to WAL
    conn.close()


def test_create_false_uses_an_existing_store_and_writes_to_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    with SQLStore(url) as writer:
        writer.ensure_task("t", BIG)
    with SQLStore(url, create=False) as operator:
        operator.request_stop("t", "operator")
        assert operator.task("t").stop_reason == "operator"  # type: ignore[union-attr]


def test_a_readonly_store_reads_and_refuses_every_write(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    with SQLStore(url) as writer:
        writer.ensure_task("t", BIG)
        writer.reserve_turn("t")
    before = digest(tmp_path / "lg.db")
    with SQLStore(url, readonly=True) as reader:
        assert reader.readonly and [t.task_id for t in reader.tasks()] == ["t"]
        assert reader.task("t").used.models == 1  # type: ignore[union-attr]
        with pytest.raises(StoreError, match="is open read-only"):
            reader.reserve_turn("t")
        with pytest.raises(StoreError, match="is open read-only"):
            reader.request_stop("t")
    assert digest(tmp_path / "lg.db") == before


_INSPECT = """
import json
from agents_loopguard.store import SQLStore, StoreError
with SQLStore({url!r}, readonly=True) as store:
    tasks = [t.task_id for t in store.tasks()]
    ops = [o.operation_id for o in store.operations()]
    try:
        store.request_stop("t")
        refused = None
    except StoreError as exc:
        refused = str(exc)
print(json.dumps({{"tasks": tasks, "ops": ops, "refused": refused}}))
"""


@pytest.mark.slow
def test_a_store_in_a_folder_this_process_may_not_write_can_be_inspected() -> None:
    """Read-only file in a read-only folder, no -wal or -shm beside it: SQLite cannot even create its shared
    memory file there; the store is still read (immutable, since nobody can write there either)."""
    folder = shared_folder()
    try:
        url = f"sqlite:///{folder / 'lg.db'}"
        with SQLStore(url) as writer:
            writer.ensure_task("t", BIG)
            writer.reserve_operation("t", "op-1", "fp", "pay")
        assert sorted(p.name for p in folder.iterdir()) == ["lg.db"]  # the last connection removed -wal and -shm
        (folder / "lg.db").chmod(0o444)
        folder.chmod(0o555)
        done = run_unprivileged(_INSPECT.format(url=url))
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["tasks"] == ["t"] and answer["ops"] == ["op-1"]
        assert "is open read-only" in answer["refused"]
        assert sorted(p.name for p in folder.iterdir()) == ["lg.db"]
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


# --- PostgreSQL: a schema is the database ---------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_an_empty_schema_is_no_store_for_a_reader_and_one_with_other_tables_is_refused(
    pg_schema_url: str,
) -> None:
    with SQLStore(pg_schema_url, readonly=True) as reader, pytest.raises(NotFoundError, match="no loopguard store"):
        reader.tasks()
    with psycopg.connect(libpq_url(pg_schema_url), autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int primary key)")
    for options in ({}, {"create": False}, {"readonly": True}):
        with SQLStore(pg_schema_url, **options) as store, pytest.raises(StoreError, match="invoices"):
            store.tasks()
    with psycopg.connect(libpq_url(pg_schema_url)) as conn:
        tables = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
        assert [name for (name,) in tables] == ["invoices"]


@pytest.mark.postgres
def test_postgres_a_readonly_store_runs_in_read_only_sessions(pg_schema_url: str) -> None:
    with SQLStore(pg_schema_url) as writer:
        writer.ensure_task("t", BIG)
    with SQLStore(pg_schema_url, readonly=True) as reader:
        assert reader.task("t") is not None
        with pytest.raises(StoreError, match="is open read-only"):
            reader.reserve_turn("t")
        cur = reader._cursor()
        cur.execute("SHOW default_transaction_read_only")
        assert cur.fetchone() == {"default_transaction_read_only": "on"}


@pytest.fixture
def database_with_an_app_schema(postgres_url: str) -> Iterator[str]:
    """A database of its own whose only table is ``app.orders`` (its ``public`` schema is empty); dropped after."""
    name = f"lg_app_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq_url(postgres_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    try:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("CREATE SCHEMA app")
            conn.execute("CREATE TABLE app.orders (id integer PRIMARY KEY, total numeric)")
        yield url
    finally:
        with psycopg.connect(libpq_url(postgres_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _public_tables(url: str) -> list[str]:
    with psycopg.connect(libpq_url(url)) as conn:
        found = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        return [str(r[0]) for r in found.fetchall()]


@pytest.mark.postgres
def test_postgres_a_database_whose_tables_live_in_another_schema_is_refused_never_stamped(
    database_with_an_app_schema: str,
) -> None:
    """Issue 31: a database whose only tables are in ``app`` got nine loopguard tables in ``public`` at a worker's
    first guard, though a database with other tables is refused, never stamped."""
    url = database_with_an_app_schema
    store = SQLStore(url)
    try:
        with pytest.raises(StoreError) as err:
            Guard(budget=BIG, store=store, task_id="t-1")
    finally:
        store.close()
    assert "app.orders" in str(err.value) and "nothing was changed" in str(err.value)
    assert _public_tables(url) == []
    own = make_url(url).update_query_dict({"options": "-csearch_path=loopguard"}).render_as_string(False)
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA loopguard")
    with SQLStore(own) as store:  # the fix the message names: a schema of its own
        Guard(budget=BIG, store=store, task_id="t-1").begin_turn()
        assert store.task("t-1").used.models == 1  # type: ignore[union-attr]
    assert _public_tables(url) == []
