"""The stop mark says whether it was newly set, atomically, and records who set it; stop hooks fire once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agents_loopguard import Budget, Guard, NotFoundError, Reason, Status
from agents_loopguard.store.base import Store

RACER = """
import json, sys, time
from pathlib import Path
from agents_loopguard.store.sql import SQLStore
url, who, barrier = sys.argv[1], sys.argv[2], Path(sys.argv[3])
store = SQLStore(url)
store.task("t")  # connect before the race
(barrier / f"ready-{who}").touch()
while not (barrier / "go").exists():
    time.sleep(0.001)
mark = store.set_stop_mark("t", f"stopped by {who}", who=who, now=time.time())
print(json.dumps({"who": who, "newly_set": mark.newly_set, "reason": mark.task.stop_reason}))
store.close()
"""


def test_the_first_mark_wins_and_says_so(store_factory: Callable[[], Store]) -> None:
    store = store_factory()
    with pytest.raises(NotFoundError):
        store.set_stop_mark("nope", "x", who="ana")
    Guard(budget=Budget(3, 3), store=store, task_id="t")
    first = store.set_stop_mark("t", "runaway", who="ana", now=5.0)
    again = store.set_stop_mark("t", "other", who="bob", now=6.0)
    assert (first.newly_set, first.task.stop_reason) == (True, "runaway")
    assert (again.newly_set, again.task.stop_reason) == (False, "runaway")
    [stop] = store.transitions("t")
    assert (stop.kind, stop.who, stop.why, stop.at, stop.from_outcome) == ("stop", "ana", "runaway", 5.0, None)
    assert store.request_stop("t", "third").stop_reason == "runaway"  # the old entry point: same mark, no record
    assert len(store.transitions("t")) == 1


def test_a_stop_after_the_outcome_records_what_it_stopped(store_factory: Callable[[], Store]) -> None:
    store = store_factory()
    Guard(budget=Budget(3, 3), store=store, task_id="t").finish(Status.STOPPED, Reason.SAME_CALL)
    store.set_stop_mark("t", "audit", who="ana")
    [stop] = store.transitions("t")
    assert stop.from_outcome is not None and stop.from_outcome["reason"] == "same_call"
    anonymous = store_factory()
    Guard(budget=Budget(3, 3), store=anonymous, task_id="u")
    assert anonymous.set_stop_mark("u", "from code").newly_set and anonymous.transitions("u") == []


@pytest.mark.timeout(120)
def test_racing_processes_set_the_mark_once(sql_url: str, tmp_path: Path) -> None:
    from agents_loopguard.store.sql import SQLStore

    store = SQLStore(sql_url)
    Guard(budget=Budget(3, 3), store=store, task_id="t")
    racers = [f"op-{n}" for n in range(6)]
    procs = [
        subprocess.Popen([sys.executable, "-c", RACER, sql_url, who, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for who in racers
    ]
    give_up = time.monotonic() + 60
    while len(list(tmp_path.glob("ready-*"))) < len(racers):
        assert time.monotonic() < give_up and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    (tmp_path / "go").touch()
    answers = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    winners = [a["who"] for a in answers if a["newly_set"]]
    assert len(winners) == 1, answers
    assert {a["reason"] for a in answers} == {f"stopped by {winners[0]}"}
    [stop] = store.transitions("t")
    assert stop.who == winners[0]
    store.close()
