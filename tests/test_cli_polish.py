"""What a newcomer meets first (issue 21, point 5): the command's help shows flags as flags and repeatable options
by what they take, ``--db`` takes a SQLite file's path or says what a URL looks like, and the README's install lines
are ones that work from a clone (the package is not published)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents_loopguard import cli
from agents_loopguard.store import SQLStore

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [c.name or "" for c in cli.app.registered_commands]


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_shows_flags_without_a_type_and_repeatable_options_by_what_they_take(command: str) -> None:
    shown = CliRunner().invoke(cli.app, [*([command] if command else []), "--help"], env={"COLUMNS": "160"})
    assert shown.exit_code == 0, shown.output
    ours = [line for line in shown.output.splitlines() if "--help" not in line]  # typer's own --help option
    assert [line for line in ours if "<bool>" in line or "<list[" in line] == []


def test_approve_names_the_call_ids_it_repeats() -> None:
    shown = CliRunner().invoke(cli.app, ["approve", "--help"], env={"COLUMNS": "160"}).output
    assert re.search(r"--call\s+CALL_ID", shown) and re.search(r"--reject\s+CALL_ID", shown)


def test_db_takes_a_sqlite_files_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.db"
    with SQLStore(f"sqlite:///{path}") as store:
        store.tasks()
    with pytest.raises(SystemExit) as done:
        cli.main(["--db", str(path), "tasks"])
    assert done.value.code == 0 and "no tasks" in capsys.readouterr().out


def test_a_db_value_that_is_no_url_says_what_a_url_looks_like(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--db", "://nowhere", "tasks"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.splitlines()) == 1
    assert "sqlite:///path/to/file.db" in err and "postgresql+psycopg://" in err and "path" in err


def test_the_readme_installs_from_a_clone_or_a_built_wheel() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", install, re.S)[0]
    assert "pip install agents-loopguard" not in commands  # not published: it finds nothing
    assert "pip install ." in commands
    assert "pip wheel --no-deps -w dist ." in commands  # the wheel tests/test_packaging.py builds and installs
    for marker in ("# the demo", "# the tests"):  # .ci/run runs the Quick start lines that end with these
        assert sum(line.rstrip().endswith(marker) for line in text.splitlines()) == 1


@pytest.mark.parametrize("command", ["tasks", "operations", "transitions", "pauses"])
def test_a_page_of_zero_rows_is_refused_not_reported_as_an_empty_store(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: ``loopguard tasks --limit 0`` must not say "no tasks in this store" of a store that has tasks."""
    db = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(SystemExit):
        cli.main(["--db", db, "demo"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        cli.main(["--db", db, command, "--limit", "0"])
    out, err = capsys.readouterr()
    assert done.value.code == 2 and "'--limit'" in err and "greater than or equal to 1" in err, err
    assert out == ""  # neither "no tasks in this store" nor an empty table
    with pytest.raises(SystemExit) as done:
        cli.main(["--db", db, "--json", command, "--limit", "0"])
    answer = json.loads(capsys.readouterr().out)
    assert done.value.code == 2 and answer["kind"] == "input" and "'--limit'" in answer["error"], answer
