"""The `loopguard` command as an operator uses it, on a real database (SQLite file, PostgreSQL).

Commands run in process through typer's ``CliRunner`` (its isolated standard streams; the same ``main`` the console
script calls, with its exit codes); a real subprocess runs them where the process is the point: the installed
console script, another working directory or environment, a worker running beside the command, and the hint a
command prints, run through the shell as a user would paste it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from agents_loopguard import Budget, Guard, Reason, RecoveryRecord, Status
from agents_loopguard.ops.approvals import pause_digest
from agents_loopguard.store.sql import SQLStore
from tests.support.cli import in_process

HERE = Path(__file__).parent
_SCRIPT = Path(sys.executable).with_name("loopguard")
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "agents_loopguard.cli"]


def loopguard(
    *args: str,
    url: str | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    cwd: Path | None = None,
) -> Any:
    """Run ``loopguard``: in process, or as a subprocess when a command, an environment or a directory is given."""
    options = [*(["--db", url] if url else []), *args]
    if command is None and env is None and cwd is None:
        done = in_process(options)
    else:
        argv = [*(command or COMMAND), *options]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    if check and done.returncode != 0:
        raise AssertionError(f"loopguard {options} exited {done.returncode}: {done.stderr}")
    return done


def refused(*args: str, url: str, code: int) -> str:
    """Run a command that must fail with ``code``: its error is exactly one line on stderr, nothing on stdout."""
    done = loopguard(*args, url=url, check=False)
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("loopguard: ") and "Traceback" not in done.stderr
    return str(done.stderr)


def refused_json(*args: str, url: str, code: int, kind: str) -> dict[str, Any]:
    """The same command under --json: the error is one JSON object on stdout with its kind and exit code."""
    done = loopguard("--json", *args, url=url, check=False)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    error = json.loads(done.stdout)
    assert error["kind"] == kind and error["exit_code"] == code and error["error"], error
    assert done.stderr == ""
    return dict(error)


def as_json(*args: str, url: str) -> Any:
    return json.loads(loopguard("--json", *args, url=url).stdout)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_demo_then_find_inspect_export_and_reconcile_the_task(sql_url: str) -> None:
    demo = loopguard("demo", url=sql_url)
    assert "stopped / no_progress" in demo.stdout and "needs_reconciliation / unknown_commit" in demo.stdout
    assert "used:    1 model turn, 1 tool execution\n" in demo.stdout, "singular counts read as such"
    assert "1 model turns" not in demo.stdout and "1 tool executions" not in demo.stdout
    hint = next(line.strip() for line in demo.stdout.splitlines() if line.strip().endswith(" tasks"))
    listed = subprocess.run(hint, shell=True, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "demo-search-" in listed.stdout, (hint, listed.stderr)  # runs as printed
    tasks = {t["task_id"]: t for t in as_json("tasks", url=sql_url)["tasks"]}
    assert len(tasks) == 3
    pay = next(t for t in tasks if t.startswith("demo-payment-") and "retry" not in t)
    assert tasks[pay]["status"] == "needs_reconciliation"
    assert tasks[pay]["used"]["tools"] == 1 and tasks[pay]["limits"]["tools"] == 4  # numbers, not "1/4"

    shown = loopguard("show", pay, url=sql_url).stdout
    assert "tool executions  1 of 4" in shown and "exception:TimeoutError" in shown
    assert "allowed next actions: query_operation_status, human_review" in shown
    detail = as_json("show", pay, url=sql_url)
    (operation,) = detail["operations"]
    assert operation["state"] == "unknown"
    # the model turn reserved, its answer (both adapters trace every attempt's result), then the lost payment
    assert [(e["kind"], e["result_class"]) for e in detail["timeline"]][:2] == [
        ("model", "reserved"),
        ("model", "answered"),
    ]
    assert [e["kind"] for e in detail["timeline"]] == ["model", "model", "tool"]

    record = RecoveryRecord.from_json(loopguard("record", pay, url=sql_url).stdout)
    assert (record.status, record.reason) == (Status.NEEDS_RECONCILIATION, Reason.EXECUTOR_EXCEPTION)
    assert record.operation_id == operation["operation_id"]

    answer = as_json(
        "reconcile",
        operation["operation_id"],
        "committed",
        "--who",
        "ops",
        "--why",
        "receiver: paid",
        "--result",
        '{"status": "ok", "receipt": "r-77"}',
        url=sql_url,
    )
    assert answer["state"] == "committed" and answer["task_reopened"] is True
    after = as_json("show", pay, url=sql_url)
    assert after["operations"][0]["state"] == "committed" and after["operations"][0]["result"]["receipt"] == "r-77"
    assert after["transitions"][0]["kind"] == "reconcile" and after["transitions"][0]["who"] == "ops"
    assert after["task"]["used"] == {"models": 1, "tools": 1, "cost": 0.0}, "reconciling never resets counters"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_stop_from_the_cli_while_a_guarded_run_is_in_progress(sql_url: str, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    worker = subprocess.Popen(
        [sys.executable, str(HERE / "workers" / "cli_long_run.py"), sql_url, "t-long", str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(600):
            if ready.exists() or worker.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), f"the worker never got going: {worker.stderr.read() if worker.stderr else ''}"
        stopped = loopguard("stop", "t-long", "--reason", "runaway batch job", "--who", "ops", url=sql_url)
        assert "stops at its next dispatch" in stopped.stdout  # it is running: the message says what happens next
        at_stop = as_json("show", "t-long", url=sql_url)["task"]["used"]["tools"]
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["record"]["status"], result["record"]["reason"]) == ("stopped", "stop_requested")
    final = as_json("show", "t-long", url=sql_url)
    assert final["task"]["used"]["tools"] == at_stop, "no execution was reserved after the stop mark committed"
    assert result["bodies_run"] == at_stop, "every body that ran had been reserved before the stop"
    assert final["task"]["stop_mark"] == "runaway batch job"
    assert at_stop < 2000


def _paused_task(url: str) -> str:
    store = SQLStore(url)
    Guard(budget=Budget(model_turns=6, tool_executions=4), store=store, task_id="t-pause").begin_turn()
    calls = [
        {"call_id": "c1", "tool": "pay", "arguments": '{"amount":5}', "operation_id": "inv-1"},
        {"call_id": "c2", "tool": "pay", "arguments": '{"amount":9}', "operation_id": "inv-2"},
    ]
    store.save_pause(
        "t-pause",
        "p-1",
        '{"run": "state"}',
        calls,
        digest=pause_digest("t-pause", '{"run": "state"}', calls),
        outcome=Guard(budget=Budget(6, 4), store=store, task_id="t-pause")
        .finish(Status.NEEDS_HUMAN, Reason.APPROVAL)
        .record()
        .to_dict(),
        now=time.time(),
    )
    store.close()
    return "p-1"


@pytest.mark.timeout(120)
def test_decide_a_pause_from_the_cli_once(sql_url: str) -> None:
    pause = _paused_task(sql_url)
    shown = as_json("pause", pause, url=sql_url)
    assert shown["digest_ok"] is True and shown["status"] == "pending" and shown["used"]["models"] == 1
    wrong = loopguard("approve", pause, "--who", "ana", "--call", "c1", "--call", "c9", url=sql_url, check=False)
    assert wrong.returncode == 2 and "no pending call 'c9'" in wrong.stderr  # bad input, not a state refusal
    partial = loopguard("approve", pause, "--who", "ana", "--call", "c1", url=sql_url, check=False)
    assert partial.returncode == 2 and "undecided calls: c2" in partial.stderr  # incomplete input
    decided = as_json("approve", pause, "--who", "ana", "--call", "c1", "--reject", "c2", url=sql_url)
    assert decided["decisions"] == {"c1": "approve", "c2": "reject"} and decided["decided_by"] == "ana"
    again = loopguard("reject", pause, "--who", "bob", url=sql_url, check=False)
    assert again.returncode == 1 and "final" in again.stderr
    assert as_json("pause", pause, url=sql_url)["decisions"] == {"c1": "approve", "c2": "reject"}


def test_a_tampered_pause_is_shown_and_refused(sql_url: str) -> None:
    url = sql_url
    pause = _paused_task(url)
    store = SQLStore(url)
    with store.engine.begin() as db:
        db.execute(sa.text("UPDATE loopguard_pauses SET pending_calls = replace(pending_calls, '5', '500')"))
    store.close()
    assert "DIGEST MISMATCH" in loopguard("pause", pause, url=url).stdout
    refused = loopguard("approve", pause, "--who", "ana", url=url, check=False)
    assert refused.returncode == 1 and "does not match its digest" in refused.stderr


def test_recover_from_the_cli_extends_limits_and_keeps_counters(sql_url: str) -> None:
    url = sql_url
    store = SQLStore(url)
    guard = Guard(budget=Budget(model_turns=2, tool_executions=2), store=store, task_id="t-r")
    guard.begin_turn()
    guard.begin_turn()
    guard.end(guard.begin_turn())  # type: ignore[arg-type]
    store.close()
    refused = loopguard("recover", "t-r", "--who", "lead", "--why", "", url=url, check=False)
    assert refused.returncode == 2 and "who decides and why" in refused.stderr  # a missing --why is bad input
    out = loopguard("recover", "t-r", "--who", "lead", "--why", "productive; 3 more", "--more-turns", "3", url=url)
    assert "limits now 5 turns" in out.stdout and "used so far 2" in out.stdout
    task = as_json("show", "t-r", url=url)
    assert task["task"]["status"] == "reopened" and task["task"]["used"]["models"] == 2
    assert task["transitions"][0]["budget_delta"] == {"model_turns": 3}


def test_clear_messages_for_wrong_ids_urls_and_schemas(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    with SQLStore(url) as store:
        store.tasks()  # the store exists (its tables are created on first use)
    missing = loopguard("show", "nope", url=url, check=False)
    assert missing.returncode == 2 and "no task 'nope'" in missing.stderr and "loopguard tasks" in missing.stderr
    assert loopguard("reconcile", "nope", "committed", "--who", "x", url=url, check=False).returncode == 2
    assert loopguard("pause", "nope", url=url, check=False).returncode == 2
    bad_scheme = loopguard("tasks", url="nosuchdb://x", check=False)
    assert bad_scheme.returncode == 2 and "unsupported database" in bad_scheme.stderr
    unreachable = loopguard("tasks", url="postgresql+psycopg://nobody@127.0.0.1:1/none", check=False)
    assert unreachable.returncode == 2 and "loopguard:" in unreachable.stderr
    assert len(unreachable.stderr.splitlines()) == 1, "psycopg's two-line message comes as one line"
    hidden = "postgresql+psycopg://nobody:secret-pw@127.0.0.1:1/none"
    line = refused("tasks", url=hidden, code=2)
    assert "secret-pw" not in line and "127.0.0.1" in line
    error = refused_json("tasks", url=hidden, code=2, kind="store")
    assert "secret-pw" not in json.dumps(error)
    with sqlite3.connect(tmp_path / "lg.db") as db:
        db.execute("UPDATE loopguard_meta SET value = '999' WHERE key = 'schema_version'")
    old = loopguard("tasks", url=url, check=False)
    assert old.returncode == 2 and "version" in old.stderr and "Traceback" not in old.stderr
    # issue 12: a command that only reads never creates a store (it used to create empty.db and say "no tasks")
    absent = loopguard("tasks", url=f"sqlite:///{tmp_path / 'empty.db'}", check=False)
    assert absent.returncode == 2 and "no loopguard store at" in absent.stderr
    assert not (tmp_path / "empty.db").exists()


def test_url_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    store = SQLStore(url)
    Guard(budget=Budget(model_turns=1, tool_executions=1), store=store, task_id="t-env")
    store.close()
    env = {**os.environ, "LOOPGUARD_DATABASE_URL": url}
    assert "t-env" in loopguard("tasks", env=env).stdout


ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _finished_tasks(url: str) -> None:
    store = SQLStore(url)
    for n, (status, reason) in enumerate(
        [(Status.COMPLETED, Reason.VALIDATED_DONE), (Status.STOPPED, Reason.SAME_CALL), (None, None)]
    ):
        guard = Guard(budget=Budget(model_turns=5, tool_executions=3), store=store, task_id=f"t-{n}")
        guard.begin_turn()
        if status is not None and reason is not None:
            guard.finish(status, reason)
    store.close()


@pytest.mark.timeout(180)
def test_json_anywhere_numbers_iso_times_and_objects(sql_url: str) -> None:
    _finished_tasks(sql_url)
    pause = _paused_task(sql_url)
    out: dict[str, Any] = {}
    for args in (["tasks"], ["show", "t-0"], ["pause", pause], ["pauses"]):
        out[args[0]] = loopguard(*args, "--json", url=sql_url).stdout  # after the command
    assert loopguard("--json", "show", "t-0", url=sql_url).stdout == out["show"], "and before it"
    out = {command: json.loads(text) for command, text in out.items()}
    rows = out["tasks"]["tasks"]
    assert [r["task_id"] for r in rows] == ["t-pause", "t-2", "t-1", "t-0"], "newest first"
    assert out["tasks"]["next"] is None, "one page"
    done = rows[-1]
    assert done["used"] == {"models": 1, "tools": 0, "cost": 0.0} and done["left"]["models"] == 4
    assert ISO.match(done["updated_at"]) and ISO.match(done["created_at"])
    shown = out["show"]
    assert all(ISO.match(step["at"]) for step in shown["timeline"])
    assert shown["task"]["outcome"]["reason"] == "validated_done", "the stored record is an object"
    paused = out["pause"]
    assert [c["arguments"] for c in paused["pending_calls"]] == [{"amount": 5}, {"amount": 9}], "objects, not text"
    assert ISO.match(paused["created_at"])
    (waiting,) = out["pauses"]["pauses"]
    assert waiting["pause_id"] == pause and waiting["task"]["status"] == "needs_human"


def test_tasks_status_and_limit_show_limit_and_a_time_column(sql_url: str) -> None:
    _finished_tasks(sql_url)
    assert [r["task_id"] for r in as_json("tasks", "--status", "stopped", url=sql_url)["tasks"]] == ["t-1"]
    first = as_json("tasks", "--limit", "2", url=sql_url)
    assert [r["task_id"] for r in first["tasks"]] == ["t-2", "t-1"]
    second = as_json("tasks", "--limit", "2", "--cursor", first["next"], url=sql_url)
    assert [r["task_id"] for r in second["tasks"]] == ["t-0"] and second["next"] is None
    hint = loopguard("tasks", "--limit", "2", url=sql_url).stdout.splitlines()[-1]
    assert hint.startswith("next page: ") and hint.endswith(f"--cursor {first['next']}") and "--limit 2" in hint
    table = loopguard("tasks", "--status", "running", url=sql_url).stdout
    assert "t-2" in table and "t-0" not in table and "\x1b[" not in table, "plain when piped"
    assert "no tasks in this store with status partial" in loopguard("tasks", "--status", "partial", url=sql_url).stdout
    assert "unknown status 'done'" in refused("tasks", "--status", "done", url=sql_url, code=2)
    store = SQLStore(sql_url)
    guard = Guard(budget=Budget(model_turns=9, tool_executions=9), store=store, task_id="t-long")
    for _ in range(5):
        guard.begin_turn()
    store.close()
    last = as_json("show", "t-long", "--limit", "2", url=sql_url)
    assert last["timeline_total"] == 5 and [step["seq"] for step in last["timeline"]] == [4, 5]
    text = loopguard("show", "t-long", "--limit", "2", url=sql_url).stdout
    header = next(line for line in text.splitlines() if line.startswith("seq"))
    assert header.split()[:3] == ["seq", "at", "kind"] and "the last 2 of 5 steps" in text
    rows = [line for line in text.splitlines() if re.match(r"^[45] ", line)]
    assert len(rows) == 2 and all(ISO.match(row.split()[1]) for row in rows)


def test_errors_one_line_or_json_with_exit_codes_by_family(sql_url: str) -> None:
    _finished_tasks(sql_url)
    pause = _paused_task(sql_url)
    assert "no task 'nope'" in refused("show", "nope", url=sql_url, code=2)
    refused_json("show", "nope", url=sql_url, code=2, kind="not_found")
    refused_json("record", "t-2", url=sql_url, code=1, kind="state")  # running: no record yet
    assert "Missing option '--who'" in refused("approve", pause, url=sql_url, code=2)
    refused_json("approve", pause, url=sql_url, code=2, kind="input")  # usage errors are JSON too
    wrong = refused_json("approve", pause, "--who", "a", "--call", "c9", url=sql_url, code=2, kind="input")
    assert "c9" in wrong["error"]
    loopguard("reject", pause, "--who", "ana", url=sql_url)
    refused_json("approve", pause, "--who", "bob", url=sql_url, code=1, kind="state")


def test_reconciling_a_committed_operation_is_a_state_refusal(sql_url: str) -> None:
    store = SQLStore(sql_url)
    guard = Guard(budget=Budget(model_turns=3, tool_executions=3), store=store, task_id="t-w")
    guard.begin_turn()
    ticket = guard.authorize({"tool": "pay", "kind": "write", "operation_id": "op-1", "args": {"n": 1}})
    guard.end(guard.fail(ticket, TimeoutError("lost")))  # type: ignore[arg-type]
    store.close()
    done = as_json("reconcile", "op-1", "committed", "--who", "ops", "--result", '{"receipt": 7}', url=sql_url)
    assert done["operation"]["result"] == {"receipt": 7} and done["task_reopened"] is True
    again = refused("reconcile", "op-1", "not_committed", "--who", "ops", url=sql_url, code=1)
    assert "already committed" in again
    refused_json(
        "reconcile", "op-1", "committed", "--who", "ops", "--result", "{bad", url=sql_url, code=2, kind="input"
    )


def test_messages_fit_the_state(sql_url: str) -> None:
    _finished_tasks(sql_url)
    pause = _paused_task(sql_url)
    finished = loopguard("stop", "t-0", "--who", "ana", url=sql_url).stdout
    assert "next dispatch" not in finished and "nothing is running" in finished
    running = loopguard("stop", "t-2", "--reason", "audit", "--who", "ana", url=sql_url).stdout
    assert "stop mark set (audit)" in running and "stops at its next dispatch" in running
    again = as_json("stop", "t-2", "--reason", "other", url=sql_url)
    assert again["stop_mark"] == "audit" and again["set_now"] is False
    waiting = loopguard("pauses", url=sql_url).stdout
    assert pause in waiting and "c1:pay, c2:pay" in waiting
    rejected = loopguard("reject", pause, "--who", "ana", url=sql_url).stdout
    assert "c1 rejected, c2 rejected" in rejected and "rejectd" not in rejected
    assert "no pause waits for a decision" in loopguard("pauses", url=sql_url).stdout


@pytest.mark.slow
def test_version_and_python_dash_m(tmp_path: Path) -> None:
    from agents_loopguard.cli.base import package_version as _package_version

    url = f"sqlite:///{tmp_path / 'lg.db'}"
    _finished_tasks(url)
    version = loopguard("--version").stdout.strip()
    assert version == f"loopguard {_package_version()}" and re.match(r"^loopguard \d+\.\d+", version)
    module = [sys.executable, "-m", "agents_loopguard"]
    assert loopguard("--version", command=module).stdout.strip() == version
    listed = json.loads(loopguard("tasks", "--json", url=url, command=module).stdout)["tasks"]
    assert [r["task_id"] for r in listed][-1] == "t-0"
    assert "Usage" in loopguard(command=module).stdout  # no command: the help, exit 0


@pytest.mark.slow
def test_hints_name_the_command_as_it_was_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lg.db'}"
    _finished_tasks(url)
    assert _SCRIPT.exists(), "the install has no loopguard script"
    relative = os.path.relpath(_SCRIPT, tmp_path)
    module = [sys.executable, "-m", "agents_loopguard"]
    for command in ([relative], module):
        error = loopguard("show", "nope", url=url, check=False, command=command, cwd=tmp_path).stderr
        hinted = re.search(r"`(.+) tasks` lists them", error)
        assert hinted is not None, error
        if command == [relative]:
            assert hinted.group(1) == relative, "the path as typed"
        again = subprocess.run(
            [*shlex.split(hinted.group(1)), "--db", url, "tasks"], cwd=tmp_path, capture_output=True, text=True
        )
        assert again.returncode == 0 and "t-0" in again.stdout, (hinted.group(1), again.stderr)


@pytest.mark.slow
def test_tables_are_coloured_only_on_a_terminal(tmp_path: Path) -> None:
    import pty

    url = f"sqlite:///{tmp_path / 'lg.db'}"
    _finished_tasks(url)
    assert "\x1b[" not in loopguard("tasks", url=url).stdout
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    primary, secondary = pty.openpty()
    worker = subprocess.Popen(
        [*COMMAND, "--db", url, "tasks"], stdout=secondary, stderr=secondary, env={**env, "TERM": "xterm-256color"}
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal closed: the command is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    assert worker.wait(timeout=60) == 0
    screen = b"".join(chunks).decode()
    assert "\x1b[" in screen and "t-0" in screen


@pytest.mark.timeout(180)
def test_demo_as_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    records = json.loads(loopguard("demo", "--json", url=url).stdout)
    assert [(r["status"], r["reason"]) for r in records] == [
        ("stopped", "no_progress"),
        ("needs_reconciliation", "executor_exception"),
        ("needs_reconciliation", "unknown_commit"),
    ]


def test_recover_from_the_cli_extends_cost_tokens_and_the_deadline(sql_url: str) -> None:
    """Every limit a budget has can be extended from the command line, not only turns and tool executions."""
    budget = Budget(model_turns=2, tool_executions=2, cost=1.0, input_tokens=100, total_tokens=150, deadline=1.0)
    with SQLStore(sql_url) as store:
        guard = Guard(budget=budget, store=store, task_id="t-x", clock=lambda: 5.0)
        guard.end(guard.begin_turn())  # type: ignore[arg-type]  # past its deadline
    args = ["--more-cost", "0.5", "--more-input-tokens", "50", "--more-total-tokens", "70", "--deadline-in", "3600"]
    out = loopguard("recover", "t-x", "--who", "lead", "--why", "a bigger document", *args, url=sql_url)
    assert "cost 1.5 (used 0)" in out.stdout and "input tokens 150 (used 0)" in out.stdout
    assert "total tokens 220" in out.stdout and "deadline 20" in out.stdout
    with SQLStore(sql_url) as store:
        after = store.task("t-x").budget  # type: ignore[union-attr]
    assert (after.cost, after.input_tokens, after.output_tokens, after.total_tokens) == (1.5, 150, None, 220)
    assert after.deadline is not None and after.deadline > 1_000_000_000  # an hour from now, on the wall clock
    bad = loopguard("recover", "t-x", "--who", "lead", "--why", "w", "--more-cost", "-1", url=sql_url, check=False)
    assert bad.returncode == 2
