"""Damaged stores and hostile input end in one clear error, never a traceback (issue 21, point 5): a SQLite file with
flipped bytes, non-UTF-8 bytes in the command's arguments, a lone surrogate in a task id, limits too large for a
store. In process and through the real ``loopguard`` command (one line on stderr, exit 2 for bad input)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agents_loopguard import Budget, Guard, Status, cli, create_runner
from agents_loopguard.store import SQLStore
from agents_loopguard.values.errors import InputError, StoreError

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(120)


def _store_with_a_task(db: Path) -> None:
    with SQLStore(f"sqlite:///{db}") as store:
        run = create_runner(
            budget=Budget(model_turns=5, tool_executions=5),
            store=store,
            task_id="t-1",
            execute=lambda call: {"status": "ok", "rows": 3},
            verify=lambda call, result: {"revision": 1, "done": True, "effect": "none"},
        )
        assert run([{"tool": "lookup", "kind": "read", "args": {"q": "x"}}]).status is Status.COMPLETED


def _flip(db: Path, marker: bytes, offset: int, byte: int) -> None:
    data = bytearray(db.read_bytes())
    at = data.find(marker)
    assert at >= 0, f"{marker!r} is not in the file"
    data[at + offset] = byte
    db.write_bytes(bytes(data))


def loopguard(*args: str | bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """The real command in its own process (bytes arguments pass as the shell would pass them)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command: list[str | bytes] = [sys.executable, "-m", "agents_loopguard", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=60)


def assert_one_line(done: subprocess.CompletedProcess[bytes], code: int, *words: str) -> str:
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == code, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err
    return err


@pytest.mark.parametrize("readonly", [True, False], ids=["read-only", "read-write"])
def test_a_sqlite_file_whose_schema_has_flipped_bytes_is_a_store_error(tmp_path: Path, readonly: bool) -> None:
    db = tmp_path / "lg.db"
    _store_with_a_task(db)
    _flip(db, b"CREATE TABLE loopguard_trace", 8, 0x80)  # not UTF-8: SQLite's own error text cannot be decoded
    with pytest.raises(StoreError, match="damaged"):
        SQLStore(f"sqlite:///{db}", readonly=readonly).tasks()


@pytest.mark.slow
def test_the_command_on_a_file_with_flipped_bytes_says_so_on_one_line(tmp_path: Path) -> None:
    db = tmp_path / "lg.db"
    _store_with_a_task(db)
    _flip(db, b"CREATE TABLE loopguard_trace", 8, 0x80)
    for command in (["tasks"], ["show", "t-1"], ["record", "t-1"], ["stop", "t-1"]):
        assert_one_line(loopguard("--db", f"sqlite:///{db}", *command, cwd=tmp_path), 2, "damaged")


def test_a_stored_json_value_that_no_longer_parses_is_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "lg.db"
    _store_with_a_task(db)
    _flip(db, b'"status":"completed"', 8, ord("?"))  # '"status"?"completed"': valid UTF-8, broken JSON
    with pytest.raises(StoreError, match="damaged JSON"):
        SQLStore(f"sqlite:///{db}", readonly=True).task("t-1")
    assert_one_line(loopguard("--db", f"sqlite:///{db}", "record", "t-1", cwd=tmp_path), 2, "damaged JSON")


def test_a_time_out_of_range_is_shown_as_not_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "lg.db"
    _store_with_a_task(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE loopguard_trace SET at = 1e300")
    with pytest.raises(SystemExit) as done:
        cli.main(["--db", f"sqlite:///{db}", "show", "t-1"])
    assert done.value.code == 0
    assert "1e+300 (not a time)" in capsys.readouterr().out


def test_arguments_that_are_not_utf8_are_refused_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "lg.db"
    _store_with_a_task(db)
    for args in (
        [b"show", b"t-\xff1"],
        [b"stop", b"t-1", b"--reason", b"\xfe\xff"],
        [b"recover", b"t-1", b"--who", b"\xff"],
    ):
        err = assert_one_line(loopguard("--db", f"sqlite:///{db}", *args, cwd=tmp_path), 2, "not valid UTF-8")
        assert "\\xff" in err or "\\xfe" in err  # the bytes, shown escaped
    with pytest.raises(SystemExit) as done:  # in process: Python keeps undecodable bytes as lone surrogates
        cli.main(["--db", f"sqlite:///{db}", "show", os.fsdecode(b"t-\xff1")])
    assert done.value.code == 2 and "not valid UTF-8" in capsys.readouterr().err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT stop_reason FROM loopguard_tasks").fetchall() == [(None,)]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_lone_surrogate_in_a_task_id_is_bad_input(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}" if backend == "sqlite" else request.getfixturevalue("pg_schema_url")
    with SQLStore(url) as store:
        with pytest.raises(InputError, match="not valid Unicode"):
            Guard(budget=Budget(1, 1), store=store, task_id="t-\ud800")
        with pytest.raises(InputError, match="not valid Unicode"):
            store.request_stop("t-\udcff", "stop")
        assert store.tasks() == []


@pytest.mark.parametrize("limit", [2**63, 2**64, 2**70])
def test_a_limit_no_store_can_hold_is_refused_before_the_store(limit: int) -> None:
    with pytest.raises(ValueError, match="from 0 to 9223372036854775807"):
        Budget(model_turns=limit, tool_executions=1)
    with pytest.raises(ValueError, match="from 0 to"):
        Budget(model_turns=1, tool_executions=1, total_tokens=limit)
    with pytest.raises(ValueError, match="finite"):
        Budget(1, 1).extended({"cost": float("inf")})


@pytest.mark.slow
def test_a_recovery_beyond_the_largest_limit_is_bad_input(tmp_path: Path) -> None:
    db = tmp_path / "lg.db"
    with SQLStore(f"sqlite:///{db}") as store:
        guard = Guard(budget=Budget(model_turns=1, tool_executions=1), store=store, task_id="t-big")
        store.request_stop("t-big", "operator")
        assert guard.end(guard.begin_turn()).status is Status.STOPPED  # type: ignore[arg-type]
    for option in ("--more-turns", "--more-tools", "--more-total-tokens"):
        done = loopguard(
            "--db", f"sqlite:///{db}", "recover", "t-big", "--who", "me", "--why", "w", option, "9" * 23, cwd=tmp_path
        )
        assert_one_line(done, 2, "from 0 to 9223372036854775807")
    with SQLStore(f"sqlite:///{db}", readonly=True) as store:
        task = store.task("t-big")
        assert task is not None and task.budget == Budget(model_turns=1, tool_executions=1) and task.status == "stopped"
