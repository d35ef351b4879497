"""A worker process that resumes decided pauses with ``resume_decided``, knowing only the application's agent code.

Usage::

    python decided_worker.py 'JOB_JSON'

The job: ``url`` (the store), ``tasks`` (whose pauses it serves), ``scenario`` (``pause_app``'s script after the
pause), ``who``, ``wait`` (seconds it keeps looking), ``ready`` (a file it creates once its store is open and its
agent built, right before it starts looking). ``$PAUSE_APP_SENT`` names the refund receiver's journal. It prints one
JSON line: ``{"pid", "met": [{"pause_id", "resumed", "claimed_elsewhere", "skipped", "outcome"}]}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the application's code (pause_app) is next to this script

import pause_app

from agents_loopguard.sdk import resume_decided_sync
from agents_loopguard.store.sql import SQLStore


def main(job: dict[str, Any]) -> dict[str, Any]:
    store = SQLStore(job["url"])
    try:
        store.task("warm-up")  # open the connection before the race, not in it
        agent = pause_app.build_agent(job["scenario"], "after")
        Path(job["ready"]).touch()
        met = resume_decided_sync(
            agent,
            tasks=job["tasks"],
            store=store,
            who=job["who"],
            wait=float(job["wait"]),
            poll=0.02,
            policy=pause_app.policy(job["scenario"]),
        )
        return {
            "pid": os.getpid(),
            "met": [
                {
                    "pause_id": m.pause_id,
                    "resumed": m.outcome is not None,
                    "claimed_elsewhere": m.claimed_elsewhere,
                    "skipped": m.skipped,
                    "outcome": m.outcome.record().to_dict() if m.outcome is not None else None,
                }
                for m in met
            ],
        }
    finally:
        store.close()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
