"""A fresh process that resumes (or decides) an approval pause, knowing only the application's agent code.

Usage::

    python pause_worker.py resume URL PAUSE_ID SCENARIO WHO [--barrier DIR] [--decisions JSON]
    python pause_worker.py approve-loop URL PAUSE_ID SCENARIO WHO MAX_APPROVALS
    python pause_worker.py decide URL PAUSE_ID WHO VERB [--barrier DIR] [--cli]

``resume``: ``resume_guarded`` with the recorded decisions (or ``--decisions``). ``approve-loop``: as an operator
and a worker would, again and again: approve every pause of the task, resume it (a fresh store handle and a fresh
agent each round), until the outcome is not an approval pause or MAX_APPROVALS were given. ``decide``: record VERB
(approve/reject) on every pending call, through ``approvals.decide`` or, with ``--cli``, the ``loopguard`` command
(it never loads the Agents SDK: an operator's shell needs none). With ``--barrier DIR`` the worker prepares
everything, writes ``DIR/ready-WHO`` and waits for ``DIR/go``, so that racing workers really start together.

Prints one JSON line: ``{"pid", "outcome": <recovery record>, "approvals"}`` or ``{"pid", "error", "message"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from agents_loopguard.approvals import decide
from agents_loopguard.store.sql import SQLStore

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the application's code (pause_app) is next to this script


def wait_at(barrier: str | None, who: str) -> None:
    if barrier is None:
        return
    (Path(barrier) / f"ready-{who}").touch()
    go = Path(barrier) / "go"
    give_up = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > give_up:
            raise SystemExit(f"{who}: nobody opened the barrier {barrier}")
        time.sleep(0.002)


def emit(**fields: Any) -> None:
    print(json.dumps({"pid": os.getpid(), **fields}), flush=True)


def resume(args: argparse.Namespace) -> None:
    import pause_app

    from agents_loopguard.sdk import resume_guarded_sync

    store = SQLStore(args.url)
    store.task("warm-up")  # open the connection before the race, not in it
    agent = pause_app.build_agent(args.scenario, "after")
    decisions = json.loads(args.decisions) if args.decisions else None
    wait_at(args.barrier, args.who)
    outcome = resume_guarded_sync(
        agent, args.pause_id, store=store, who=args.who, decisions=decisions, policy=pause_app.policy(args.scenario)
    )
    emit(outcome=outcome.record().to_dict())


def approve_loop(args: argparse.Namespace) -> None:
    import pause_app

    from agents_loopguard import Status
    from agents_loopguard.sdk import resume_guarded_sync

    pause_id, approvals = args.pause_id, 0
    while True:
        operator = SQLStore(args.url)  # the operator's own handle
        decide(operator, pause_id, who="operator", approve_all=True, why=f"approval #{approvals + 1}")
        operator.close()
        approvals += 1
        worker = SQLStore(args.url)  # the worker's own handle, and a fresh agent: only the store carries the task
        outcome = resume_guarded_sync(
            pause_app.build_agent(args.scenario, "after"),
            pause_id,
            store=worker,
            who=args.who,
            policy=pause_app.policy(args.scenario),
        )
        worker.close()
        if outcome.status is not Status.NEEDS_HUMAN or approvals >= args.max_approvals:
            emit(outcome=outcome.record().to_dict(), approvals=approvals)
            return
        assert outcome.pause_id is not None and outcome.pause_id != pause_id
        pause_id = outcome.pause_id


def decide_cmd(args: argparse.Namespace) -> None:
    store = SQLStore(args.url)
    store.pause(args.pause_id)  # open the connection before the race
    if args.cli:
        from agents_loopguard.cli import main as loopguard

        wait_at(args.barrier, args.who)
        try:
            loopguard(["--db", args.url, "--json", args.verb, args.pause_id, "--who", args.who])
        except SystemExit as exit_:
            code = exit_.code
        else:
            code = 0
        emit(cli_exit=code)
        return
    wait_at(args.barrier, args.who)
    record = decide(
        store, args.pause_id, who=args.who, approve_all=args.verb == "approve", reject_all=args.verb == "reject"
    )
    emit(decided=record.decisions, decided_by=record.decided_by)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("resume")
    p.add_argument("url")
    p.add_argument("pause_id")
    p.add_argument("scenario")
    p.add_argument("who")
    p.add_argument("--barrier")
    p.add_argument("--decisions")
    p = sub.add_parser("approve-loop")
    p.add_argument("url")
    p.add_argument("pause_id")
    p.add_argument("scenario")
    p.add_argument("who")
    p.add_argument("max_approvals", type=int)
    p = sub.add_parser("decide")
    p.add_argument("url")
    p.add_argument("pause_id")
    p.add_argument("who")
    p.add_argument("verb", choices=["approve", "reject"])
    p.add_argument("--barrier")
    p.add_argument("--cli", action="store_true")
    args = parser.parse_args()
    commands = {"resume": resume, "approve-loop": approve_loop, "decide": decide_cmd}
    try:
        commands[args.command](args)
    except Exception as exc:  # the answer a test reads: which error, and its message
        emit(error=type(exc).__name__, message=str(exc))


if __name__ == "__main__":
    main()
