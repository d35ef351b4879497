"""Every fault under the store is one line of StoreError naming the store, and the step that failed kept nothing.

Real faults: paths under files, folders a process may not write (an unprivileged process: root ignores
permissions), a disk that fills up (a 1 MiB tmpfs), a PostgreSQL backend killed between and in the middle of steps,
a PostgreSQL URL without the driver installed (a process where ``import psycopg`` fails).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agents_loopguard import Budget
from agents_loopguard.store import SQLStore, StoreError, TraceEntry
from tests.conftest import libpq_url
from tests.support.unprivileged import ROOT, run_unprivileged, shared_folder

pytestmark = pytest.mark.timeout(120)

BIG = Budget(model_turns=10**6, tool_executions=10**6)


def one_line_naming(error: BaseException, url: str) -> str:
    message = str(error)
    assert "\n" not in message, message
    assert f"SQLStore({url!r})" in message, message
    return message


# --- paths -----------------------------------------------------------------------------------------------------------


def test_a_path_under_a_file_is_a_store_error_naming_it() -> None:
    url = "sqlite:////etc/passwd/x.db"
    with pytest.raises(StoreError) as err:
        SQLStore(url)
    assert "/etc/passwd is a file, not a folder" in one_line_naming(err.value, url)


def test_a_path_deeper_under_a_file_and_a_folder_as_the_file_are_store_errors(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a folder")
    deeper = f"sqlite:///{tmp_path}/plain/sub/x.db"
    with pytest.raises(StoreError) as err:
        SQLStore(deeper)
    assert "is a file, not a folder" in one_line_naming(err.value, deeper)
    folder = f"sqlite:///{tmp_path}"
    with pytest.raises(StoreError) as err:
        SQLStore(folder)
    assert f"{tmp_path} is a folder, not a database file" in one_line_naming(err.value, folder)


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "notes.db").write_bytes(b"these are notes, not a database" * 200)
    url = f"sqlite:///{tmp_path / 'notes.db'}"
    with SQLStore(url) as store, pytest.raises(StoreError) as err:
        store.tasks()
    assert "not a database" in one_line_naming(err.value, url)
    assert (tmp_path / "notes.db").read_bytes() == b"these are notes, not a database" * 200


# --- permissions (an unprivileged process) ---------------------------------------------------------------------------

_OPEN_AND_WRITE = """
import json, sys
from agents_loopguard import Budget
from agents_loopguard.store import SQLStore, StoreError
try:
    with SQLStore(sys.argv[1]) as store:
        store.ensure_task("t", Budget(model_turns=1, tool_executions=1))
    print(json.dumps({"ok": True}))
except StoreError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def unprivileged_open(url: str) -> dict[str, Any]:
    done = run_unprivileged(_OPEN_AND_WRITE.replace("sys.argv[1]", repr(url)))
    assert done.returncode == 0 and done.stderr == "", done.stderr  # no traceback: an answer
    return dict(json.loads(done.stdout))


@pytest.mark.slow
def test_a_folder_this_process_may_not_write_is_a_store_error() -> None:
    folder = shared_folder()  # root's, mode 755: others may enter but not write
    try:
        url = f"sqlite:///{folder}/lg.db"
        answer = unprivileged_open(url)
        assert answer["error"] == "StoreError"
        assert "permission denied" in answer["message"] and f"SQLStore({url!r})" in answer["message"]
        assert not (folder / "lg.db").exists()
        nested = f"sqlite:///{folder}/sub/lg.db"
        answer = unprivileged_open(nested)
        assert answer["error"] == "StoreError" and "cannot create the folder" in answer["message"]
    finally:
        shutil.rmtree(folder)


@pytest.mark.slow
def test_a_store_file_this_process_may_not_write_is_a_store_error() -> None:
    folder = shared_folder()
    try:
        url = f"sqlite:///{folder}/lg.db"
        with SQLStore(url) as store:
            store.ensure_task("t", BIG)
        before = (folder / "lg.db").read_bytes()
        answer = unprivileged_open(url)  # may read the file (644), not write it or its folder
        assert answer["error"] == "StoreError" and f"SQLStore({url!r})" in answer["message"]
        assert "read-only for this process" in answer["message"] or "permission denied" in answer["message"]
        assert (folder / "lg.db").read_bytes() == before
    finally:
        shutil.rmtree(folder)


# --- a full disk ------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(where: Path) -> Iterator[Path | None]:
    """A 1 MiB tmpfs at ``where``; None when this machine does not allow mounting one."""
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill_until_refused(store: SQLStore, task_id: str) -> tuple[int, StoreError]:
    """Record steps with large arguments until the disk is full; how many went through, and the error."""
    store.ensure_task(task_id, BIG)
    for n in range(10_000):
        entry = TraceEntry(kind="tool", tool="write", args={"blob": f"{n:06d}" + "x" * 20_000}, result_class="ok")
        try:
            store.record_execution(task_id, entry, revision=n + 1)
        except StoreError as exc:
            return n, exc
    raise AssertionError("the disk never filled up")


def test_a_full_disk_is_one_line_and_the_failed_step_kept_nothing(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        if disk is None:  # no mount here: the same path with the operating system's answer injected
            inject_a_full_disk(tmp_path)
            return
        (disk / "filler").write_bytes(b"\0" * 200_000)
        url = f"sqlite:///{disk / 'lg.db'}"
        store = SQLStore(url)
        try:
            recorded, error = fill_until_refused(store, "t")
            message = one_line_naming(error, url)
            assert "is full" in message and str(disk / "lg.db") in message, message
            task = store.task("t")
            assert task is not None and task.revision == recorded  # the refused step did not advance it
            assert len(store.trace("t")) == recorded  # and left no trace entry
            (disk / "filler").unlink()  # space again: the store goes on
            store.record_execution("t", TraceEntry(kind="tool", tool="small", result_class="ok"), revision=10**6)
            assert store.task("t").revision == 10**6  # type: ignore[union-attr]
        finally:
            store.close()


def inject_a_full_disk(tmp_path: Path) -> None:
    import errno
    from unittest import mock

    url = f"sqlite:///{tmp_path / 'new' / 'lg.db'}"
    with (
        mock.patch.object(Path, "mkdir", side_effect=OSError(errno.ENOSPC, "No space left on device")),
        pytest.raises(StoreError) as err,
    ):
        SQLStore(url)
    assert "No space left on device" in one_line_naming(err.value, url)


# --- PostgreSQL: a connection killed ----------------------------------------------------------------------------------


def terminate(url: str, pid: int) -> None:
    """Kill a backend from another connection, as an administrator (or a crash) would."""
    with psycopg.connect(libpq_url(url), autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() != (0,):
            pass


def backend_pid(store: SQLStore) -> int:
    cur = store._cursor()
    cur.execute("SELECT pg_backend_pid() AS pid")
    return int(cur.fetchone()["pid"])


@pytest.mark.postgres
def test_a_connection_killed_between_steps_is_replaced_transparently(pg_schema_url: str) -> None:
    with SQLStore(pg_schema_url) as store:
        store.ensure_task("t", BIG)
        assert store.reserve_turn("t").granted
        first = backend_pid(store)
        terminate(pg_schema_url, first)
        grant = store.reserve_turn("t")  # nothing was sent on the dead connection
        assert grant.granted and grant.used.models == 2
        assert backend_pid(store) != first
        assert store.task("t").used.models == 2  # type: ignore[union-attr]


@pytest.mark.postgres
def test_a_connection_killed_in_the_middle_of_a_step_is_one_line_and_nothing_is_half_applied(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SQLStore(pg_schema_url) as store:
        store.ensure_task("t", Budget(model_turns=1, tool_executions=1))
        store.finish("t", {"status": "stopped", "reason": "model_budget"})
        pid = backend_pid(store)
        steps = store._steps
        read_task = steps.get_task

        def read_then_die(cur: Any, task_id: str) -> Any:
            row = read_task(cur, task_id)  # the transaction has begun and read the task
            terminate(pg_schema_url, pid)
            return row

        monkeypatch.setattr(steps, "get_task", read_then_die)
        with pytest.raises(StoreError) as err:
            store.recover("t", who="lead", why="more turns", budget_delta={"model_turns": 5})
        message = one_line_naming(err.value, store.url.render_as_string(hide_password=True))
        assert "connection to the database was lost" in message
        monkeypatch.setattr(steps, "get_task", read_task)
        task = store.task("t")  # the next step reconnects
        assert task is not None and (task.status, task.budget.model_turns) == ("stopped", 1)
        assert store.transitions("t") == []  # no half of the recovery was kept
        store.recover("t", who="lead", why="more turns", budget_delta={"model_turns": 5})
        assert store.task("t").budget.model_turns == 6  # type: ignore[union-attr]


def test_an_unreachable_server_is_one_line_without_the_password() -> None:
    url = "postgresql+psycopg://lg:hunter2@127.0.0.1:1/none?connect_timeout=2"
    store = SQLStore(url)
    with pytest.raises(StoreError, match="cannot connect") as err:
        store.task("t")
    assert "\n" not in str(err.value) and "hunter2" not in str(err.value)


def test_a_postgres_url_without_psycopg_names_the_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"  # as if psycopg were not installed
        "from agents_loopguard.store import SQLStore\n"
        "SQLStore('postgresql://app:secret@db.internal/agents')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "agents_loopguard.values.errors.StoreError: SQLStore('postgresql+psycopg://app:***@db.internal"
    )
    assert "pip install 'agents-loopguard[postgres]'" in last and "secret" not in done.stderr
