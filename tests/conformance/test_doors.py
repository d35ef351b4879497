"""Every door of every framework against the same invariants (R19), and docs/doors.md against the rows.

The rows live in ``tests/conformance/doors_<framework>.py`` (each file a ``DOORS`` list); this module collects them
all. See README.md in this folder for what a row is and what each invariant means.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.conformance
from agents_loopguard.store import MemoryStore, SQLStore
from tests.conformance.kit import FRAMEWORKS, Door, Env, rows, violations
from tests.support import stores

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
DOORS_MD = ROOT / "docs" / "doors.md"


def row_modules() -> list[Any]:
    """Every ``doors_*`` module of this package, imported."""
    names = sorted(m.name for m in pkgutil.iter_modules(tests.conformance.__path__) if m.name.startswith("doors_"))
    return [importlib.import_module(f"tests.conformance.{name}") for name in names]


ROWS = rows(row_modules())

sqlite_template = pytest.fixture(stores.sqlite_template, scope="session", name="sqlite_template")
postgres_schema = pytest.fixture(stores.postgres_schema, scope="session", name="postgres_schema")


PROCESSES = {"mcp", "dbos", "restate", "temporal"}
"""The frameworks whose rows run the tool bodies in other processes (an MCP server, durable workers): ``slow``."""


def _cases() -> Iterator[Any]:
    for door in ROWS:
        marks = [pytest.mark.xfail(strict=True, reason=door.broken)] if door.broken else []
        marks += [pytest.mark.slow] if door.framework in PROCESSES else []
        for kind in door.stores[:1] if door.mark == "refused" else door.stores:
            kind_marks = [*marks, pytest.mark.postgres] if kind == "postgres" else marks
            variants = ["run", "stop"] if door.stop_at is not None and door.mark != "refused" else ["run"]
            for variant in variants:
                yield pytest.param((door, kind, variant), id=f"{door.id}-{kind}-{variant}", marks=kind_marks)


@pytest.fixture
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    """The row's task on a store of the case's kind, as freshly migrated (tests/support/stores.py)."""
    door, kind, variant = request.node.callspec.params["case"]
    url: str | None = None
    if kind == "memory":
        store: Any = MemoryStore()
    else:
        if kind == "sqlite":
            url = request.getfixturevalue("sqlite_template").copy(tmp_path)
        else:
            schema = request.getfixturevalue("postgres_schema")
            schema.reset()
            url = schema.url
        store = SQLStore(url)
    task_id = f"door-{door.framework}-{door.name}-{uuid.uuid4().hex[:8]}"
    env = Env(store, kind, url, task_id, door.budget, variant, tmp_path, stop_at=door.stop_at)
    try:
        yield env
    finally:
        if isinstance(store, SQLStore):
            store.close()


@pytest.mark.parametrize("case", list(_cases()))
def test_r19_every_door_keeps_the_invariants(case: tuple[Door, str, str], env: Env) -> None:
    """R19: whatever door a framework gives a call, a body runs only under its own reservation (I1), a write runs
    at most once per operation id (I2), the model received exactly the requests the task counted (I3), nested
    agents share the parent's task and budget and never conclude it (I4), and the stop mark stops the door: no body
    and no request after it is set (I5, the ``stop`` variant). A door the adapter cannot guard is refused when the
    run starts, with the fix named. Counted at the bodies, the receiver and the model, never by our counters."""
    door = case[0]
    seen = door.build(env)
    problems = violations(door, env, seen)
    assert problems == [], f"{door.id} ({door.doc}): " + "; ".join(problems)


# --- docs/doors.md and the rows cannot drift ------------------------------------------------------------------


def sections(text: str) -> dict[str, str]:
    """Heading (``## <name>``) -> the text of its section.

    >>> sections("# T\\n## A\\none\\n## B\\ntwo")
    {'A': 'one', 'B': 'two'}
    """
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1].strip() for i in range(1, len(parts), 2)}


def test_r19_docs_doors_md_shows_every_row_in_its_framework_section_with_its_mark() -> None:
    """R19: each framework's doors are listed in one inventory: every row of the kit appears in docs/doors.md, in
    its framework's section, on a line that carries its id, its door line verbatim and its mark."""
    found = sections(DOORS_MD.read_text(encoding="utf-8"))
    assert set(FRAMEWORKS.values()) <= set(found), "docs/doors.md needs a section per framework"
    missing = []
    for door in ROWS:
        lines = [line for line in found[FRAMEWORKS[door.framework]].splitlines() if f"`{door.id}`" in line]
        if not any(door.doc in line and door.mark in line for line in lines):
            missing.append(f"{door.id}: {door.doc} ({door.mark})")
    assert missing == [], "docs/doors.md lacks these rows (id, door line, mark on one line):\n" + "\n".join(missing)


def test_every_row_named_in_docs_doors_md_exists_in_the_kit() -> None:
    """A row id in docs/doors.md that no row has is a door the doc claims is proven and nothing proves."""
    text = DOORS_MD.read_text(encoding="utf-8")
    frameworks = "|".join(FRAMEWORKS)
    named = set(re.findall(rf"`((?:{frameworks}):[a-z0-9-]+)`", text))
    assert named - {door.id for door in ROWS} == set()
