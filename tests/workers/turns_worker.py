"""A worker process for tests/test_operations_over_time.py: guarded turns on a shared store while a prune runs.

Run as ``python -m tests.workers.turns_worker URL TASK_ID TURNS LOG GO``: it waits for the file ``GO``, then takes
``TURNS`` guarded steps (a model turn and a tool execution each, settled with verified progress), appending one
line to ``LOG`` per tool body that ran, and ends the task. Exit code 0: every step was granted.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from agents_loopguard import Budget, Guard, Reason, Status, Verdict
from agents_loopguard.store import SQLStore


def main(url: str, task_id: str, turns: int, log: str, go: str) -> int:
    deadline = time.monotonic() + 60
    while not Path(go).exists():
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.002)
    store = SQLStore(url)
    guard = Guard(budget=Budget(model_turns=turns + 1, tool_executions=turns + 1), store=store, task_id=task_id)
    with open(log, "a") as out:
        for n in range(1, turns + 1):
            if guard.begin_turn() is not None:
                return 1
            ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"page": n}})
            if isinstance(ticket, Verdict):
                return 2
            out.write(f"{n}\n")
            out.flush()
            guard.settle(ticket, {"status": "ok"}, evidence={"revision": n, "done": False, "effect": "none"})
    guard.finish(Status.COMPLETED, Reason.VALIDATED_DONE)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]))
