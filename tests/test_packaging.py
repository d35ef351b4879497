"""The package as a user installs it: the wheel, its metadata, a fresh venv; and the one name of the store."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, MemoryStore, Status, create_runner
from agents_loopguard.cli.base import package_version as _package_version

ROOT = Path(__file__).resolve().parent.parent


def _wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of the sources (the build writes nothing into the work tree)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    package = ROOT / "agents_loopguard"
    shutil.copytree(package, source / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("agents_loopguard-*.whl")
    return wheel


def _run(*argv: str | Path) -> Any:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, cwd="/")


@pytest.mark.slow
@pytest.mark.packaging
@pytest.mark.timeout(900)
def test_the_wheel_installs_in_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line for line in archive.read(metadata).decode().splitlines() if line.startswith("Requires-Dist")]
    assert "agents_loopguard/py.typed" in names and "agents_loopguard/__main__.py" in names
    psycopg = [line for line in requires if "psycopg" in line]
    assert psycopg and all('extra == "postgres"' in line or 'extra == "dev"' in line for line in psycopg), psycopg

    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python, script = env / "bin" / "python", env / "bin" / "loopguard"
    installed = _run(python, "-m", "pip", "install", "-q", str(wheel))
    assert installed.returncode == 0, installed.stderr
    version = _run(script, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"loopguard {_package_version()}", version.stderr
    module = _run(python, "-m", "agents_loopguard", "--version")
    assert module.returncode == 0 and module.stdout == version.stdout, module.stderr
    assert _run(python, "-c", "import psycopg").returncode != 0, "SQLite needs no PostgreSQL driver"
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    absent = _run(script, "--db", url, "tasks")  # a read never creates a store
    assert absent.returncode == 2 and "no loopguard store at" in absent.stderr, absent.stderr
    made = _run(python, "-c", f"from agents_loopguard.store.sql import SQLStore; SQLStore({url!r}).tasks()")
    assert made.returncode == 0, made.stderr
    sqlite = _run(script, "--db", url, "tasks")
    assert sqlite.returncode == 0 and "no tasks" in sqlite.stdout, sqlite.stderr
    postgres = _run(script, "--db", "postgresql+psycopg://app@127.0.0.1:1/agents", "tasks")
    assert postgres.returncode == 2 and "psycopg" in postgres.stderr, postgres.stderr
    assert len(postgres.stderr.splitlines()) == 1 and "Traceback" not in postgres.stderr


def test_create_runner_takes_store_and_ledger_is_a_deprecated_alias() -> None:
    def runner(**where: Any) -> Any:
        return create_runner(
            budget=Budget(model_turns=2, tool_executions=2),
            task_id="t",
            execute=lambda call: {"status": "ok"},
            verify=lambda call, result: {"revision": 1, "done": True, "effect": "none"},
            **where,
        )

    call = {"tool": "search", "kind": "read", "args": {"q": "x"}}
    store = MemoryStore()
    assert runner(store=store)([call]).status is Status.COMPLETED and store.task("t") is not None
    old = MemoryStore()
    with pytest.warns(DeprecationWarning, match="store="):
        run = runner(ledger=old)
    assert run([call]).status is Status.COMPLETED and old.task("t") is not None, "the alias names the same store"
    with pytest.raises(TypeError, match="once"):
        runner(store=MemoryStore(), ledger=MemoryStore())
