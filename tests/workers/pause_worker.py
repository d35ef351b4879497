"""A worker process that resumes (or decides) approval pauses, knowing only the application's agent code.

Usage::

    python pause_worker.py serve          # jobs as JSON lines on stdin, one JSON answer line each on stdout
    python pause_worker.py 'JOB_JSON'     # one job, then exit

A worker holds nothing of a task but what it reads from the store: every job opens its own store handle and builds
a fresh agent from ``pause_app``. Jobs (keys besides ``command``):

* ``resume``: url, pause_id, scenario, who, [decisions], [barrier]: ``resume_guarded`` with the recorded decisions
  (or ``decisions``).
* ``approve-loop``: url, pause_id, scenario, who, max_approvals: as an operator and a worker would, again and again:
  approve every pending call of the task's pause, resume it (fresh store handles, a fresh agent each round), until
  the outcome is not an approval pause or ``max_approvals`` were given.
* ``decide``: url, pause_id, who, verb, [barrier], [cli]: record ``verb`` (approve/reject) on every pending call,
  through ``approvals.decide`` or, with ``cli``, the ``loopguard`` command.

``journal`` (optional, any job) names the refund receiver's journal (``$PAUSE_APP_SENT``). With ``barrier`` (a
directory) the worker prepares everything, writes ``ready-WHO`` there and waits for ``go``, so that racing workers
really start together. Answers: ``{"pid", "outcome": <recovery record>, "approvals"}``, ``{"pid", "decided"}``,
``{"pid", "cli_exit"}`` or ``{"pid", "error", "message"}``; ``serve`` first prints ``{"pid", "ready": true}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the application's code (pause_app) is next to this script

import pause_app

from agents_loopguard import Status
from agents_loopguard.cli import main as loopguard
from agents_loopguard.ops.approvals import decide
from agents_loopguard.sdk import resume_guarded_sync
from agents_loopguard.store.sql import SQLStore


def wait_at(barrier: str | None, who: str) -> None:
    if barrier is None:
        return
    (Path(barrier) / f"ready-{who}").touch()
    go = Path(barrier) / "go"
    give_up = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > give_up:
            raise TimeoutError(f"{who}: nobody opened the barrier {barrier}")
        time.sleep(0.002)


def resume(job: dict[str, Any]) -> dict[str, Any]:
    store = SQLStore(job["url"])
    try:
        store.task("warm-up")  # open the connection before the race, not in it
        agent = pause_app.build_agent(job["scenario"], "after")
        wait_at(job.get("barrier"), job["who"])
        outcome = resume_guarded_sync(
            agent,
            job["pause_id"],
            store=store,
            who=job["who"],
            decisions=job.get("decisions"),
            policy=pause_app.policy(job["scenario"]),
        )
        return {"outcome": outcome.record().to_dict()}
    finally:
        store.close()


def approve_loop(job: dict[str, Any]) -> dict[str, Any]:
    pause_id, approvals = job["pause_id"], 0
    while True:
        operator = SQLStore(job["url"])  # the operator's own handle
        decide(operator, pause_id, who="operator", approve_all=True, why=f"approval #{approvals + 1}")
        operator.close()
        approvals += 1
        worker = SQLStore(job["url"])  # the worker's own handle, and a fresh agent: only the store carries the task
        outcome = resume_guarded_sync(
            pause_app.build_agent(job["scenario"], "after"),
            pause_id,
            store=worker,
            who=job["who"],
            policy=pause_app.policy(job["scenario"]),
        )
        worker.close()
        if outcome.status is not Status.NEEDS_HUMAN or approvals >= job["max_approvals"]:
            return {"outcome": outcome.record().to_dict(), "approvals": approvals}
        assert outcome.pause_id is not None and outcome.pause_id != pause_id
        pause_id = outcome.pause_id


def decide_job(job: dict[str, Any]) -> dict[str, Any]:
    store = SQLStore(job["url"])
    try:
        store.pause(job["pause_id"])  # open the connection before the race
        wait_at(job.get("barrier"), job["who"])
        if job.get("cli"):
            try:
                loopguard(["--db", job["url"], "--json", job["verb"], job["pause_id"], "--who", job["who"]])
            except SystemExit as exit_:
                return {"cli_exit": exit_.code}
            return {"cli_exit": 0}
        verb = job["verb"]
        record = decide(
            store, job["pause_id"], who=job["who"], approve_all=verb == "approve", reject_all=verb == "reject"
        )
        return {"decided": record.decisions, "decided_by": record.decided_by}
    finally:
        store.close()


JOBS = {"resume": resume, "approve-loop": approve_loop, "decide": decide_job}


def run(job: dict[str, Any]) -> dict[str, Any]:
    if job.get("journal"):
        os.environ[pause_app.SENT_ENV] = job["journal"]
    try:
        answer = JOBS[job["command"]](job)
    except Exception as exc:  # the answer a test reads: which error, and its message
        answer = {"error": type(exc).__name__, "message": str(exc)}
    return {"pid": os.getpid(), **answer}


def reply(answer: dict[str, Any]) -> None:
    sys.__stdout__.write(json.dumps(answer) + "\n")  # type: ignore[union-attr]
    sys.__stdout__.flush()  # type: ignore[union-attr]


def main() -> None:
    sys.stdout = sys.stderr  # what a job prints (the CLI's own output) must not mix with the answers
    if sys.argv[1:] != ["serve"]:
        reply(run(json.loads(sys.argv[1])))
        return
    reply({"pid": os.getpid(), "ready": True})
    for line in sys.stdin:
        if line.strip():
            reply(run(json.loads(line)))


if __name__ == "__main__":
    main()
