"""A guarded Agents SDK run that keeps making verified progress until something stops it.

Usage: python cli_long_run.py URL TASK_ID READY_FILE. Writes READY_FILE after its third tool execution, then goes on
(one execution every few milliseconds) until the guard refuses; prints the outcome's recovery record as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget
from agents_loopguard.sdk import guarded_tool, run_guarded_sync
from agents_loopguard.store.sql import SQLStore


def main() -> None:
    url, task_id, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    set_tracing_disabled(True)
    done: list[int] = []

    @guarded_tool(verify=lambda args, out: {"revision": args["n"], "done": False, "effect": "none"})
    def step(n: int) -> str:
        """Process one batch."""
        done.append(n)
        if len(done) == 3:
            ready.write_text("ready")
        time.sleep(0.01)
        return f"batch {n} processed"

    turns: list[Any] = [[function_call("step", {"n": n}, call_id=f"c{n}")] for n in range(1, 2001)]
    agent = Agent(name="batcher", model=ScriptedModel([*turns, [assistant_message("all batches done")]]), tools=[step])
    outcome = run_guarded_sync(
        agent,
        "process the batches",
        budget=Budget(model_turns=5000, tool_executions=5000),
        store=SQLStore(url),
        task_id=task_id,
        max_turns=5000,
    )
    print(json.dumps({"record": outcome.record().to_dict(), "bodies_run": len(done)}))


if __name__ == "__main__":
    main()
