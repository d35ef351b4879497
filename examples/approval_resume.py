"""An approval pause resumed in another process, with the task's counters continuing (no API key needed).

1. This process runs the support agent; the refund needs a human, so the run pauses: ``needs_human/approval``.
   The pause (the SDK's RunState, the task's budget and counters, the pending call) is stored in a SQLite file.
2. An operator approves it from another shell: ``loopguard --db URL approve PAUSE --who you`` (run here as a
   subprocess, exactly as typed).
3. A fresh process, which has only this file's agent code, resumes the pause: the refund runs once, the task
   completes, and the counters go on from where the pause left them (3 of 6 model turns, not 1 of 6).

The model is ``agents.testing.ScriptedModel``: it answers from the conversation it is sent, so both processes use
the same agent code.

Run: ``python examples/approval_resume.py`` (or ``--db URL`` for another store, e.g. PostgreSQL).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, Outcome
from agents_loopguard.sdk import guarded_tool, resume_guarded_sync, run_guarded_sync
from agents_loopguard.store.sql import SQLStore

set_tracing_disabled(True)
BUDGET = Budget(model_turns=6, tool_executions=4)
REFUNDS: dict[int, int] = {}  # the payment system (in this process; a real one would be a service)


@guarded_tool(verify=lambda args, output: {"revision": 1, "done": False, "effect": "none"})
def lookup_order(order: int) -> dict[str, Any]:
    """Look up an order."""
    return {"order": order, "paid": 30, "status": "damaged on arrival"}


def refunded(args: dict[str, Any], output: Any) -> dict[str, Any]:
    """The application's trusted check: ask the payment system, not the model."""
    done = REFUNDS.get(int(args["order"])) == int(args["amount"])
    return {"revision": 2 if done else 1, "done": done, "effect": "committed" if done else "not_committed"}


@guarded_tool(
    kind="write",
    operation_id=lambda args: f"refund-order-{args['order']}",
    verify=refunded,
    needs_approval=True,
)
def refund(order: int, amount: int) -> str:
    """Refund an order (a human approves every refund)."""
    REFUNDS[order] = amount
    return f"refunded {amount} EUR for order {order}"


def next_turn(call: ModelCall) -> list[Any]:
    """What the scripted model says, given the conversation so far."""
    outputs = [item for item in call.input if isinstance(item, dict) and item.get("type") == "function_call_output"]
    if not outputs:
        return [function_call("lookup_order", {"order": 42}, call_id="call-lookup")]
    if len(outputs) == 1:
        return [function_call("refund", {"order": 42, "amount": 30}, call_id="call-refund")]
    return [assistant_message("Order 42 was refunded (30 EUR).")]


def support_agent() -> Agent[Any]:
    """The application's agent: each process builds it from this code."""
    return Agent(
        name="support",
        instructions="Help the customer. Refunds need a human's approval.",
        model=ScriptedModel([ModelStep.respond(next_turn) for _ in range(6)]),
        tools=[lookup_order, refund],
    )


def counters(store: SQLStore, task_id: str) -> str:
    task = store.task(task_id)
    assert task is not None
    return (
        f"model turns {task.used.models}/{task.budget.model_turns}, "
        f"tool executions {task.used.tools}/{task.budget.tool_executions}"
    )


def show(step: str, outcome: Outcome, store: SQLStore) -> None:
    print(f"{step}: {outcome.status}/{outcome.reason}; {counters(store, outcome.task_id)}")


def resume(db: str, pause_id: str) -> None:
    """The second process: only the agent code above, the store URL and the pause id."""
    store = SQLStore(db)
    outcome = resume_guarded_sync(support_agent(), pause_id, store=store, who="worker-2")
    show(f"3. resumed in process {os.getpid()}", outcome, store)
    print(f"   final output: {outcome.result.final_output!r}; value: {outcome.value!r}")
    print(f"   recovery record: {outcome.record().to_json()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="store URL (default: a SQLite file in a temporary directory)")
    parser.add_argument("--resume", metavar="PAUSE_ID", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.resume:
        resume(args.db, args.resume)
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or f"sqlite:///{tmp}/loopguard.db"
        store = SQLStore(db)
        task_id = f"support-ticket-{uuid.uuid4().hex[:6]}"
        complaint = "My order 42 arrived broken."
        paused = run_guarded_sync(support_agent(), complaint, budget=BUDGET, store=store, task_id=task_id)
        show(f"1. paused in process {os.getpid()}", paused, store)
        pause = store.pause(paused.pause_id or "")
        assert pause is not None
        for call in pause.pending_calls:
            print(f"   waits for approval: {call['tool']} {call['arguments']} (operation {call['operation_id']})")
        print(f"   stored with the pause: {pause.used.models} model turns and {pause.used.tools} tool executions used")

        command = ["loopguard", "--db", db, "approve", pause.pause_id, "--who", "you"]
        print(f"2. operator, in another shell: {' '.join(command)}")
        approved = subprocess.run(
            [sys.executable, "-m", "agents_loopguard.cli", *command[1:]], capture_output=True, text=True, check=True
        )
        print(f"   {approved.stdout.strip()}")

        subprocess.run([sys.executable, __file__, "--db", db, "--resume", pause.pause_id], check=True)

        [transition] = store.transitions(task_id)
        print(
            f"4. recorded: {transition.kind} of {transition.pause_id} by {transition.who}, "
            f"decisions {transition.decisions}; the task continued: {counters(store, task_id)}"
        )
        store.close()


if __name__ == "__main__":
    main()
