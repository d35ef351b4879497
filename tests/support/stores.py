"""Store fixtures' bodies shared by test modules (a module makes one its fixture with
``store = pytest.fixture(sql_store, name="store")``).

Fresh databases, cheaply, for modules that open one per test by the hundred (the run-rule matrix): migrating a new
database is most of a short test's time (about 50 ms on PostgreSQL, 8 ms on SQLite, against 10-20 ms for the run),
so the migration runs once per worker and each test starts from its result:

* :class:`SQLiteTemplate`: a SQLite file migrated once; each test gets a byte copy of it;
* :class:`PostgresSchema`: a schema migrated once; each test puts it back as the migration left it (every
  row deleted, the migration's own rows put back, the sequences restarted).

Each test still opens its own :class:`SQLStore` (nothing of one test's store object reaches the next) on a database
identical to a freshly migrated one.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents_loopguard.store import MemoryStore, SQLStore, Store

__all__ = ["PostgresSchema", "SQLiteTemplate", "fresh_store", "postgres_schema", "sql_store", "sqlite_template"]


def sql_store(sql_url: str) -> Iterator[SQLStore]:
    """A :class:`SQLStore` on the fresh database of ``sql_url`` (each SQL backend), closed afterwards."""
    opened = SQLStore(sql_url)
    yield opened
    opened.close()


def _migrate(url: str) -> None:
    """Create and migrate the store at ``url`` (a store migrates on its first use)."""
    with SQLStore(url) as store:
        store.task("migrated")


@dataclass
class SQLiteTemplate:
    """A SQLite store file migrated once (:meth:`create`); :meth:`copy` gives a test its own copy."""

    path: Path

    @classmethod
    def create(cls, folder: Path) -> SQLiteTemplate:
        path = folder / "template.db"
        _migrate(f"sqlite:///{path}")
        leftovers = [p.name for p in folder.iterdir() if p != path]
        assert leftovers == [], f"the closed template left {leftovers} beside it (a copy would miss them)"
        return cls(path)

    def copy(self, folder: Path) -> str:
        """The URL of a fresh copy of the template in ``folder``."""
        target = folder / "loopguard.db"
        shutil.copyfile(self.path, target)
        return f"sqlite:///{target}"


@dataclass
class PostgresSchema:
    """A schema of the test database, migrated once (:meth:`create`), put back in that state by :meth:`reset` and
    dropped by :meth:`drop`."""

    server: str
    """The libpq URL of the test database."""
    name: str
    url: str
    """The SQLAlchemy URL whose connections use the schema."""
    script: str = ""
    """What :meth:`reset` runs: every table's rows deleted, the migration's own rows (the schema version) put back,
    every sequence restarted."""

    @classmethod
    def create(cls, server: str, url_on: Any) -> PostgresSchema:
        """Create and migrate a schema; ``url_on(schema)`` is the store URL whose connections use it."""
        import psycopg

        name = f"lg_matrix_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        schema = cls(server, name, str(url_on(name)))
        _migrate(schema.url)
        with psycopg.connect(server, autocommit=True) as conn:
            schema.script = _reset_script(conn, name)
        return schema

    def reset(self) -> None:
        """Put the schema back as the migration left it, in one transaction and one round trip (``DELETE`` is
        several times cheaper than ``TRUNCATE`` on tables this small)."""
        import psycopg

        with psycopg.connect(self.server) as conn:  # one transaction, committed on leaving
            conn.execute(self.script.encode())

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')


def _reset_script(conn: Any, schema: str) -> str:
    """The statements that bring ``schema`` back to its present state (rows and sequences), as one text (the
    store's tables have no foreign keys: any order of deletes works; one added would make this fail loudly)."""
    from psycopg import sql

    def rows(query: str) -> list[Any]:
        return list(conn.execute(query, (schema,)).fetchall())

    tables = [t for (t,) in rows("SELECT table_name FROM information_schema.tables WHERE table_schema = %s")]
    tables.sort(key=lambda t: t in ("loopguard_tallies", "loopguard_refusals"))  # last: the triggers write them
    sequences = [
        q for (q,) in rows("SELECT sequence_name FROM information_schema.sequences WHERE sequence_schema = %s")
    ]
    statements = [f'DELETE FROM "{schema}"."{t}"' for t in tables]
    for table in tables:
        for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall():
            values = sql.SQL(", ").join(sql.Literal(v) for v in row).as_string(conn)
            statements.append(f'INSERT INTO "{schema}"."{table}" VALUES ({values})')
    statements += [f'ALTER SEQUENCE "{schema}"."{q}" RESTART' for q in sequences]
    return ";\n".join(statements)


def sqlite_template(tmp_path_factory: Any) -> SQLiteTemplate:
    """Body of a session fixture: this worker's migrated SQLite template."""
    return SQLiteTemplate.create(tmp_path_factory.mktemp("template"))


def postgres_schema(postgres_url: str) -> Iterator[PostgresSchema]:
    """Body of a session fixture: this worker's migrated PostgreSQL schema, dropped at the end."""
    from tests.conftest import libpq_url, with_search_path

    schema = PostgresSchema.create(libpq_url(postgres_url), lambda name: with_search_path(postgres_url, name))
    yield schema
    schema.drop()


def fresh_store(kind: str, request: Any, tmp_path: Path) -> Iterator[Store]:
    """Body of a per-test fixture: a store on a database identical to a freshly migrated one, of ``kind``
    (``memory``, ``sqlite``, ``postgres``); its module registers ``sqlite_template`` and ``postgres_schema``."""
    if kind == "memory":
        yield MemoryStore()
        return
    if kind == "sqlite":
        url = request.getfixturevalue("sqlite_template").copy(tmp_path)
    else:
        schema = request.getfixturevalue("postgres_schema")
        schema.reset()
        url = schema.url
    opened = SQLStore(url)
    try:
        yield opened
    finally:
        opened.close()
