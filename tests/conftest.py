"""Shared fixtures: the store under test on every backend (memory, a SQLite file, PostgreSQL).

PostgreSQL comes from ``LOOPGUARD_TEST_POSTGRES_URL`` (for example
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Unset: the PostgreSQL cases skip and say why. Set but
unreachable: they fail. Each test gets a schema of its own (dropped afterwards), so tests never see each other's rows
and can run again and again on the same database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from agents_loopguard.store import MemoryStore, SQLStore, Store

PG_ENV = "LOOPGUARD_TEST_POSTGRES_URL"
BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
SQL_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def libpq_url(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as psycopg/libpq reads it (without the ``+psycopg`` driver name)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def with_search_path(url: str, schema: str) -> str:
    """``url`` whose connections use ``schema`` (libpq ``options=-csearch_path=...``)."""
    parsed = make_url(url)
    return parsed.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test server's URL; skips when unset, fails when set and unreachable."""
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(
            f"{PG_ENV} is not set: PostgreSQL store tests skipped "
            f"(set {PG_ENV}=postgresql+psycopg://postgres@127.0.0.1:5432/test to run them)"
        )
    import psycopg

    try:
        with psycopg.connect(libpq_url(url), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        shown = make_url(url).render_as_string(hide_password=True)
        pytest.fail(f"{PG_ENV}={shown} is set but the server is unreachable: {exc}", pytrace=False)
    return url


@pytest.fixture
def pg_schema_url(postgres_url: str) -> Iterator[str]:
    """A URL on a fresh, empty schema of the test database; the schema is dropped after the test."""
    import psycopg

    schema = f"lg_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq_url(postgres_url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield with_search_path(postgres_url, schema)
    finally:
        with psycopg.connect(libpq_url(postgres_url), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'loopguard.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture(params=SQL_BACKENDS)
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database URL on each SQL backend."""
    return _url(str(request.param), request, tmp_path)


@pytest.fixture(params=BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens stores on one fresh database of each backend (memory: always the same instance)."""
    backend = str(request.param)
    if backend == "memory":
        memory = MemoryStore()
        yield lambda: memory
        return
    url = _url(backend, request, tmp_path)
    opened: list[SQLStore] = []

    def open_store() -> Store:
        opened.append(SQLStore(url))
        return opened[-1]

    yield open_store
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: Callable[[], Store]) -> Store:
    """A store on a fresh database, on each backend."""
    return store_factory()
