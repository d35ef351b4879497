"""Schema migrations: the baseline is the first release's schema, stores of an older version are refused until
``loopguard migrate`` brings them up, and a migrated store keeps every row.

The old stores are fixtures written by the first release itself (``scripts/make_store_fixture.py``): a SQLite
file, and for PostgreSQL a ``pg_dump`` of a schema it wrote, loaded into the test's own schema.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from agents_loopguard import Budget, OperationState, Outcome, Reason, Usage
from agents_loopguard.ops.approvals import check_pause, decide
from agents_loopguard.ops.triggers import TriggerGuard
from agents_loopguard.store import SQLStore, StoreError
from agents_loopguard.store.sql import HEAD_REVISION, METADATA, SCHEMA_VERSION
from agents_loopguard.store.sql.migrate import migrate
from agents_loopguard.store.sql.schema import VERSION_TABLE
from agents_loopguard.values.errors import NotFoundError
from tests.conftest import libpq_url
from tests.support.cli import in_process

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
OLDEST = 1
"""The oldest schema version kept as a fixture (the first release's)."""


def sqlite_fixture(tmp_path: Path, version: int = OLDEST) -> str:
    target = tmp_path / f"store-v{version}.sqlite"
    shutil.copyfile(FIXTURES / f"store-v{version}.sqlite", target)
    return f"sqlite:///{target}"


def postgres_fixture(url: str, version: int = OLDEST) -> str:
    """Load the dump of a store of ``version`` into the (empty) schema of ``url``; return ``url``."""
    schema = dict(make_url(url).query)["options"].split("=", 1)[1]
    text = (FIXTURES / f"store-v{version}.postgres.sql").read_text().replace("loopguard_fixture", schema)
    statements = [line for line in text.splitlines() if not line.startswith(("\\", "CREATE SCHEMA"))]
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("\n".join(statements))
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a store written by the first release, on each SQL backend."""
    if request.param == "sqlite":
        return sqlite_fixture(tmp_path)
    return postgres_fixture(str(request.getfixturevalue("pg_schema_url")))


def rows(url: str, table: str, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Every row of ``table``, in a stable order (``columns``: only those)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            names = columns or [c["name"] for c in sa.inspect(conn).get_columns(table)]
            query = f"SELECT {', '.join(names)} FROM {table} ORDER BY {', '.join(names)}"
            return [tuple(r) for r in conn.exec_driver_sql(query)]
    finally:
        engine.dispose()


def tables_of(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return sorted(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def loopguard(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it, with no store from the environment (in this process)."""
    return in_process(args, env={"LOOPGUARD_DATABASE_URL": None})


# --- the migrations themselves ---------------------------------------------------------------------------------------


def test_the_migrations_ship_in_the_package_as_one_line_of_revisions_up_to_this_schema() -> None:
    from alembic.script import ScriptDirectory

    from agents_loopguard.store.sql.migrate import _config

    scripts = ScriptDirectory.from_config(_config())
    assert scripts.get_heads() == [HEAD_REVISION] and f"{SCHEMA_VERSION:04d}" == HEAD_REVISION
    chain = [r.revision for r in scripts.walk_revisions("base", "heads")]
    assert chain == [f"{n:04d}" for n in range(SCHEMA_VERSION, 0, -1)]
    assert (
        Path(scripts.dir).is_relative_to(ROOT / "agents_loopguard") and (Path(scripts.dir) / "script.py.mako").is_file()
    )


def test_the_baseline_revision_is_the_schema_the_first_release_created_on_sqlite(tmp_path: Path) -> None:
    from alembic import command

    from agents_loopguard.store.sql.migrate import _config

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'baseline.db'}")
    with engine.begin() as conn:
        command.upgrade(_config(connection=conn), "0001")
    engine.dispose()
    ddl = "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND name != ? ORDER BY name"
    baseline = sqlite3.connect(tmp_path / "baseline.db").execute(ddl, (VERSION_TABLE,)).fetchall()
    first = sqlite3.connect(FIXTURES / "store-v1.sqlite").execute(ddl, (VERSION_TABLE,)).fetchall()
    assert baseline == first
    assert sqlite3.connect(tmp_path / "baseline.db").execute("SELECT value FROM loopguard_meta").fetchall() == [("1",)]


PG_SHAPE = """
    SELECT c.table_name, c.column_name, c.data_type, c.is_nullable, c.character_maximum_length,
           c.column_default IS NOT NULL AS has_default
    FROM information_schema.columns c WHERE c.table_schema = current_schema() AND c.table_name != %s
    ORDER BY 1, 2
"""
PG_INDEXES = """
    SELECT tablename, indexname, regexp_replace(indexdef, ' ON [^ ]+\\.', ' ON ') FROM pg_indexes
    WHERE schemaname = current_schema() AND tablename != %s ORDER BY 1, 2
"""


@pytest.mark.postgres
def test_the_baseline_revision_is_the_schema_the_first_release_created_on_postgres(postgres_url: str) -> None:
    from alembic import command

    from agents_loopguard.store.sql.migrate import _config
    from tests.conftest import with_search_path

    shapes = []
    for loaded in (False, True):
        schema = f"lg_baseline_{os.getpid()}_{int(loaded)}"
        with psycopg.connect(libpq_url(postgres_url), autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            admin.execute(f'CREATE SCHEMA "{schema}"')
        url = with_search_path(postgres_url, schema)
        try:
            if loaded:
                postgres_fixture(url)
            else:
                engine = sa.create_engine(url)
                with engine.begin() as conn:
                    command.upgrade(_config(connection=conn), "0001")
                engine.dispose()
            with psycopg.connect(libpq_url(url)) as conn:
                shapes.append(
                    (
                        conn.execute(PG_SHAPE, (VERSION_TABLE,)).fetchall(),
                        conn.execute(PG_INDEXES, (VERSION_TABLE,)).fetchall(),
                    )
                )
        finally:
            with psycopg.connect(libpq_url(postgres_url), autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert shapes[0] == shapes[1]
    assert len(shapes[0][0]) > 50 and len(shapes[0][1]) >= 16


# --- the command -----------------------------------------------------------------------------------------------------


def test_migrate_a_current_store_does_nothing_and_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    SQLStore(url).close()
    with SQLStore(url) as store:
        store.tasks()
    done = loopguard("--db", url, "migrate")
    assert done.returncode == 0 and "nothing to migrate" in done.stdout and done.stderr == ""
    assert migrate(url).revisions == () and migrate(url, dry_run=True).sql == ""


def test_migrate_needs_a_loopguard_store(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    done = loopguard("--db", f"sqlite:///{missing}", "migrate")
    assert (done.returncode, done.stderr) == (2, f"loopguard: no loopguard store at {missing}\n")
    assert not missing.exists()
    with pytest.raises(NotFoundError):
        migrate(f"sqlite:///{missing}", dry_run=True)
    app = tmp_path / "app.db"
    conn = sqlite3.connect(app)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="is not a loopguard store"):
        migrate(f"sqlite:///{app}")
    assert tables_of(f"sqlite:///{app}") == ["customers"]


def test_a_store_of_a_newer_version_is_neither_used_nor_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    SQLStore(url).tasks()
    with sqlite3.connect(tmp_path / "lg.db") as conn:
        conn.execute("UPDATE loopguard_meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="upgrade agents_loopguard"):
        migrate(url)
    done = loopguard("--json", "--db", url, "migrate", "--dry-run")
    assert done.returncode == 2 and "newer than this agents_loopguard" in done.stdout  # --json: the error as JSON
    assert json.loads(done.stdout)["kind"] == "store"


def test_migrate_refuses_a_store_whose_version_table_disagrees_with_its_meta(tmp_path: Path) -> None:
    url = sqlite_fixture(tmp_path)
    with sqlite3.connect(make_url(url).database) as conn:
        conn.execute(f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) PRIMARY KEY)")
        conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES ('0042')")
    before = rows(url, "loopguard_tasks")
    if SCHEMA_VERSION > OLDEST:
        with pytest.raises(StoreError, match="changed by hand"):
            migrate(url)
    assert rows(url, "loopguard_tasks") == before


V1_TABLES = sorted(
    f"loopguard_{name}"
    for name in ("meta", "tasks", "operations", "trace", "repetitions", "seen", "activations", "pauses", "transitions")
)


def test_the_fixture_is_a_store_of_the_oldest_version(old_store: str) -> None:
    assert rows(old_store, "loopguard_meta") == [("schema_version", str(OLDEST))]
    assert tables_of(old_store) == V1_TABLES
    assert len(rows(old_store, "loopguard_tasks")) == 10 and len(rows(old_store, "loopguard_transitions")) == 4
    assert rows(old_store, "loopguard_pauses", ["pause_id", "status", "decisions", "decided_by"]) == [
        ("p-r", "resumed", '{"c1":"reject"}', None),
        ("pause-decided", "decided", '{"c1":"approve"}', "ana"),
        ("pause-pending", "pending", "{}", None),
    ]


# --- a store of the first release, migrated ---------------------------------------------------------------------------


def everything(url: str, columns: dict[str, list[str]] | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the first release, in ``columns`` (default: the ones the tables have now)."""
    columns = columns or columns_of(url)
    return {table: rows(url, table, names) for table, names in columns.items()}


def columns_of(url: str) -> dict[str, list[str]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            return {t: [c["name"] for c in inspector.get_columns(t)] for t in V1_TABLES}
    finally:
        engine.dispose()


def schema_drift(url: str) -> list[Any]:
    """What differs between the database and the store's tables (Alembic's autogenerate comparison)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), METADATA)
    finally:
        engine.dispose()
    return [d for d in diff if not (d[0] == "remove_table" and d[1].name == VERSION_TABLE)]


def test_a_store_of_the_first_release_is_refused_until_migrated_and_nothing_is_changed(old_store: str) -> None:
    before = everything(old_store)
    with SQLStore(old_store) as store, pytest.raises(StoreError) as err:
        store.tasks()
    message = str(err.value)
    assert f"schema version {OLDEST}" in message and "`loopguard migrate`" in message and "--dry-run" in message
    shown = make_url(old_store).render_as_string(hide_password=True)
    done = loopguard("--db", shown, "tasks")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "loopguard migrate" in done.stderr
    assert everything(old_store) == before and tables_of(old_store) == V1_TABLES


def test_migrate_dry_run_prints_the_sql_and_changes_nothing(old_store: str) -> None:
    before = everything(old_store)
    done = loopguard("--db", old_store, "migrate", "--dry-run")
    assert done.returncode == 0, done.stderr
    sql = done.stdout
    assert f"CREATE TABLE {VERSION_TABLE}" in sql and "INSERT INTO loopguard_alembic_version" in sql
    assert "ALTER TABLE loopguard_tasks ADD COLUMN input_token_limit BIGINT" in sql
    assert "CREATE TABLE loopguard_tool_runs" in sql
    assert f"UPDATE loopguard_meta SET value = '{SCHEMA_VERSION}'" in sql
    assert everything(old_store) == before and tables_of(old_store) == V1_TABLES


def test_migrate_keeps_every_row_and_the_new_columns_work(old_store: str) -> None:
    first_release = columns_of(old_store)
    before = everything(old_store, first_release)
    done = loopguard("--db", old_store, "migrate")
    assert done.returncode == 0 and "from schema version 1 to" in done.stdout, done.stderr
    after = everything(old_store, first_release)
    moved = {"row-by-act-0": "flow:orders:row-by-act-0"}  # R18: an activation's write moved into its namespace
    expected = {table: sorted(tuple(moved.get(v, v) for v in row) for row in got) for table, got in before.items()}
    # every row, every value, but the activation's operation id, wherever it was named
    assert {t: sorted(got) for t, got in after.items()} | {"loopguard_meta": before["loopguard_meta"]} == expected
    assert rows(old_store, "loopguard_meta") == [("schema_version", str(SCHEMA_VERSION))]
    assert rows(old_store, VERSION_TABLE) == [(HEAD_REVISION,)]
    assert schema_drift(old_store) == []  # the same tables, columns and indexes as a store created today
    assert (
        rows(old_store, "loopguard_tasks", ["input_tokens", "output_tokens", "total_token_limit"])
        == [(0, 0, None)] * 10
    )
    again = loopguard("--db", old_store, "migrate")
    assert again.returncode == 0 and "nothing to migrate" in again.stdout
    with SQLStore(old_store) as store:
        old_budget = store.task("fx-completed")
        assert old_budget is not None and old_budget.budget.model_turns == 2**53 + 1  # exact, not a double
        assert old_budget.budget.deadline == 4_102_444_800.5 and old_budget.status == "completed"
        assert store.lookup_operation("order-42-confirm").result["n"] == 2**53 + 1  # type: ignore[union-attr]
        assert store.lookup_operation("inv-7-pay").state is OperationState.UNKNOWN  # type: ignore[union-attr]
        assert [t.kind for t in store.transitions()] == ["reconcile", "reconcile", "recover", "resume"]
        assert store.task("fx-stopped").used.cost == 0.5  # type: ignore[union-attr]
        # the new columns work, on old tasks and new ones
        assert store.reserve_tokens("fx-pages", 10, 5).used == Usage(input_tokens=10, output_tokens=5)
        store.ensure_task("new", Budget(model_turns=5, tool_executions=5, total_tokens=100))
        assert store.reserve_tokens("new", 60, 30).granted and not store.reserve_tokens("new", 10, 1).granted
        assert store.reserve_execution("new", "a", max_repeats=2, tool_limit=("mail", 1)).granted
        assert store.reserve_execution("new", "b", max_repeats=2, tool_limit=("mail", 1)).reason is Reason.TOOL_LIMIT
        # R18: the activation's write is in its flow's namespace, and the chain through it still holds
        (moved_op,) = store.operations("fx-act-0")
        assert moved_op.operation_id == "flow:orders:row-by-act-0" and store.lookup_operation("row-by-act-0") is None
        assert store.activation("fx-act-1").origin_operation_id == moved_op.operation_id  # type: ignore[union-attr]
        echo = TriggerGuard(store, flow="orders", max_depth=0).activate("fx-echo", origin_operation_id="row-by-act-0")
        assert isinstance(echo, Outcome) and echo.reason is Reason.TRIGGER_CHAIN
        # the old pauses resume as before
        pending = store.pause("pause-pending")
        assert pending is not None and check_pause(pending) == pending
        decide(store, "pause-pending", who="ana", approve_all=True)
        claimed, transition = store.claim_pause("pause-decided", who="worker")
        assert claimed.decisions == {"c1": "approve"} and transition.from_outcome["reason"] == "approval"  # type: ignore[index]
