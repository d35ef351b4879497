"""``loopguard tune`` and ``loopguard label`` (R21: thresholds derived from stored traces), on the traces the efficacy
corpus writes into a real SQLite file and a real PostgreSQL schema.

The replay is checked against the real thing: for every candidate threshold, the false stops ``tune`` reports are
exactly the legitimate trajectories that the engine stops when it runs them again under that threshold."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from agents_loopguard import MemoryStore, Policy, Status, cli
from agents_loopguard.ops import tuning
from agents_loopguard.store.sql import SQLStore
from agents_loopguard.values.errors import InputError
from benchmarks.efficacy.corpus import Trajectory, build
from benchmarks.efficacy.paths import run

pytestmark = pytest.mark.timeout(300)


def sample(per_shape: int = 3) -> list[Trajectory]:
    chosen: dict[str, list[Trajectory]] = {}
    for trajectory in build():
        shape = chosen.setdefault(trajectory.shape, [])
        if len(shape) < per_shape:
            shape.append(trajectory)
    return [t for group in chosen.values() for t in group]


@pytest.fixture(scope="module")
def corpus() -> list[Trajectory]:
    return sample()


@pytest.fixture
def store(sql_url: str, corpus: list[Trajectory]) -> Iterator[SQLStore]:
    """The corpus's sample run through the engine with ``Policy()``, each task named ``<shape>:<id>`` in the
    family of its shape."""
    with SQLStore(sql_url) as opened:
        for trajectory in corpus:
            task_id = f"{trajectory.shape}:{trajectory.id}"
            run(trajectory, "engine", store=opened, task_id=task_id, family=trajectory.shape)
        yield opened


def loopguard(store: SQLStore, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``loopguard --db URL ARGS...`` as the console script runs it: its exit code and what it printed."""
    with pytest.raises(SystemExit) as done:
        cli.main(["--db", store.url.render_as_string(hide_password=False), *args])
    printed = capsys.readouterr()
    return int(done.value.code or 0), printed.out + printed.err


def tune_json(store: SQLStore, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out = loopguard(store, capsys, "--json", "tune", *args)
    assert code == 0, out
    return dict(json.loads(out))


def stopped_live(corpus: list[Trajectory], policy: Policy) -> int:
    """Legitimate trajectories the engine stops when it runs them under ``policy``."""
    legit = [t for t in corpus if t.label == "legit"]
    return sum(run(t, "engine", policy=policy, store=MemoryStore()).outcome.status is Status.STOPPED for t in legit)


def test_r21_tune_replays_the_stored_traces_and_its_false_stops_are_the_engines_own(
    store: SQLStore, corpus: list[Trajectory], capsys: pytest.CaptureFixture[str]
) -> None:
    """R21: every rule's candidates replayed from the store: the current thresholds stop no legitimate task and cut
    every loop where it was cut; each candidate's false stops equal the engine's own when the legitimate work runs
    again under that candidate; stricter candidates show the false stops that make them worse."""
    report = tune_json(store, capsys)
    scope = report["scope"]
    ended = [t.status for t in store.tasks()]
    # a task the model ended (completed, partial) is legitimate; one a loop rule stopped, a loop; the rest (a write
    # to reconcile) is left out. The corpus's loops that end validated done (asks-after-done) count as legitimate.
    assert scope["correct"] == sum(s in ("completed", "partial") for s in ended)
    assert scope["loops"] + scope["left_out"] == sum(s not in ("completed", "partial") for s in ended)
    assert scope["loops"] >= 20
    for rule, data in report["rules"].items():
        for candidate in data["candidates"]:
            policy = tuning._policy(dataclasses.replace(Policy(), shadow=False), rule, candidate["value"])
            assert candidate["false_stops"] == stopped_live(corpus, policy), (rule, candidate["value"])
            assert candidate["loops_cut"] + candidate["later"] == scope["loops"]
        current = next(c for c in data["candidates"] if c["value"] == data["current"])
        assert (current["false_stops"], current["loops_cut"], current["earlier"]) == (0, scope["loops"], 0), rule
    worse = {
        rule: [c["value"] for c in data["candidates"] if c["false_stops"]] for rule, data in report["rules"].items()
    }
    assert 10 in worse["max_polls"] and 60.0 in worse["max_wait"] and 3 in worse["max_failures"], worse
    assert report["totals"]["false_stops"] == 0 and report["policy"].startswith("Policy(max_same_call=")
    stricter = next(c for c in report["rules"]["max_same_call"]["candidates"] if c["value"] == 1)
    assert stricter["earlier"] > 0, "one execution per call cuts the identical repeats one run earlier"


def test_r21_tune_takes_a_family_a_time_window_and_the_operators_labels(
    store: SQLStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """R21: ``--family`` keeps one kind of task, ``--since``/``--until`` a window of finished times, and
    ``--correct-only`` counts as legitimate only the tasks an operator labelled correct (``loopguard label``)."""
    polls = tune_json(store, capsys, "--family", "long-poll")
    assert (polls["scope"]["tasks"], polls["scope"]["loops"]) == (3, 0)
    assert tune_json(store, capsys, "--since", "1d")["scope"]["tasks"] == 0  # the corpus's clock stops in 1970
    assert tune_json(store, capsys, "--until", "1970-01-02T00:00:00Z")["scope"]["tasks"] > 40
    loops = tune_json(store, capsys)["scope"]["loops"]
    for task in ("long-poll:long-poll-000", "fan-out:fan-out-001"):
        code, out = loopguard(store, capsys, "label", task, "correct", "--who", "ana", "--why", "reviewed")
        assert code == 0 and "labelled correct by ana" in out, out
    assert loopguard(store, capsys, "label", "pagination:pagination-000", "loop", "--who", "ana")[0] == 0
    vouched = tune_json(store, capsys, "--correct-only")
    assert vouched["scope"]["correct"] == 2
    assert vouched["scope"]["loops"] == loops + 1  # the task labelled a loop joins the loops
    code, out = loopguard(store, capsys, "label", "fan-out:fan-out-001", "maybe", "--who", "ana")
    assert code == 2 and "correct, loop" in out
    assert loopguard(store, capsys, "label", "no-such-task", "correct", "--who", "ana")[0] == 2


def test_r21_tune_prints_a_policy_and_each_rules_table_for_people(
    store: SQLStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """R21: without ``--json``: the scope, one table per rule (its candidates' false stops, loops cut, executions
    earlier), and the recommended ``Policy(...)``."""
    code, out = loopguard(store, capsys, "tune")
    assert code == 0, out
    assert "finished tasks replayed" in out and "max_wait (now 600.0" in out
    assert "\nrecommended: Policy(max_same_call=" in out


def test_parse_when_refuses_what_is_neither_a_time_nor_a_duration() -> None:
    with pytest.raises(InputError, match="neither an ISO 8601 time nor a duration"):
        tuning.parse_when("last tuesday")
