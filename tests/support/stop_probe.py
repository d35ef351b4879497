"""A stop hook for tests in other processes: appends one JSON line per call to the file named by $STOP_PROBE_FILE."""

from __future__ import annotations

import json
import os

from agents_loopguard.ops.stops import StopEvent


def record(event: StopEvent) -> None:
    with open(os.environ["STOP_PROBE_FILE"], "a", encoding="utf-8") as probe:
        line = {"pid": os.getpid(), "task_id": event.task_id, "who": event.who, "reason": event.reason}
        probe.write(json.dumps(line) + "\n")


def explode(event: StopEvent) -> None:
    raise RuntimeError(f"the pager is down (token=abc123secret) for {event.task_id}")
