"""Approve in the web console: a run pauses, an operator approves in the browser, another process resumes it.

1. ``pause``: the support agent looks the order up and proposes a refund, which needs a human: the run ends
   ``needs_human/approval`` and the pause is stored with the task's counters (2 of 6 model turns, 1 of 4 tool
   executions). The refund's ``note`` is the customer's own words, so it is attacker-controlled text: the console
   shows it as text (try ``--note "<script>alert(1)</script>"``).
2. The operator opens the console (``loopguard serve``), sees the call in the approvals inbox with its redacted
   arguments and the task's budget, and approves it with a note. The decision records the operator's token name.
3. ``resume``: a fresh process, with only this file's agent code, waits until the pause is decided and resumes it:
   the refund runs once, the task completes, and the counters continue (3 of 6, 2 of 4; not 1 of 6).

Without a subcommand it walks through all three on a temporary SQLite file: it starts ``loopguard serve`` with a
one-run operator token, pauses the run, prints the console's address and where the token is, and waits for you to
approve in your browser (``--auto`` approves through the HTTP API instead, for a run without a browser).

The model is ``agents.testing.ScriptedModel`` (no API key): it answers from the conversation it is sent.

Run: ``python examples/console_approval.py`` (``--auto`` without a browser), or step by step::

    python examples/console_approval.py pause --db sqlite:///loopguard.db --task ticket-981
    loopguard --db sqlite:///loopguard.db serve          # then approve at http://127.0.0.1:8765/
    python examples/console_approval.py resume --db sqlite:///loopguard.db PAUSE_ID --wait 600
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget
from agents_loopguard.sdk import guarded_tool, resume_decided_sync, run_guarded_sync
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
def refund(order: int, amount: int, note: str) -> str:
    """Refund an order, with the customer's words as the note (a human approves every refund)."""
    REFUNDS[order] = amount
    return f"refunded {amount} EUR for order {order}"


def _complaint(call: ModelCall) -> str:
    for item in call.input if isinstance(call.input, list) else []:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return str(call.input)


def next_turn(call: ModelCall) -> list[Any]:
    """What the scripted model says, given the conversation so far (the refund's note quotes the customer)."""
    outputs = [item for item in call.input if isinstance(item, dict) and item.get("type") == "function_call_output"]
    if not outputs:
        return [function_call("lookup_order", {"order": 42}, call_id="call-lookup")]
    if len(outputs) == 1:
        refund_args = {"order": 42, "amount": 30, "note": _complaint(call)}
        return [function_call("refund", refund_args, call_id="call-refund")]
    return [assistant_message("Order 42 was refunded (30 EUR).")]


def support_agent() -> Agent[Any]:
    """The application's agent: each process builds it from this code."""
    return Agent(
        name="support",
        instructions="Help the customer. Refunds need a human's approval.",
        model=ScriptedModel([ModelStep.respond(next_turn) for _ in range(6)]),
        tools=[lookup_order, refund],
    )


def counters(store: SQLStore, task_id: str) -> dict[str, int]:
    task = store.task(task_id)
    assert task is not None
    return {
        "models": task.used.models,
        "model_turns": task.budget.model_turns,
        "tools": task.used.tools,
        "tool_executions": task.budget.tool_executions,
    }


def pause(db: str, task_id: str, note: str) -> dict[str, Any]:
    """Step 1: run until the refund waits for a human; the pause is stored with the task's counters."""
    store = SQLStore(db)
    try:
        outcome = run_guarded_sync(support_agent(), note, budget=BUDGET, store=store, task_id=task_id)
        return {
            "pid": os.getpid(),
            "task_id": task_id,
            "status": str(outcome.status),
            "reason": str(outcome.reason),
            "pause_id": outcome.pause_id,
            "counters": counters(store, task_id),
        }
    finally:
        store.close()


def resume(db: str, pause_id: str, wait: float) -> dict[str, Any]:
    """Step 3: resume the pause once an operator decided it, in this process (counters continue). No poller of our
    own: ``resume_decided`` waits for the decisions on the pause's task (and would lose the claim, safely, to
    another worker that got there first)."""
    store = SQLStore(db)
    try:
        paused = store.pause(pause_id)
        if paused is None:
            raise SystemExit(f"no pause {pause_id!r} in {db}")
        met = resume_decided_sync(support_agent(), tasks=[paused.task_id], store=store, who="worker-2", wait=wait)
        done = [m for m in met if m.pause_id == pause_id]
        if not done:
            raise SystemExit(f"pause {pause_id} is still waiting for a decision after {wait:g} s")
        outcome = done[0].outcome
        if outcome is None:
            raise SystemExit(f"pause {pause_id} was not resumed here: {done[0].skipped}")
        record = store.pause(pause_id)
        assert record is not None
        return {
            "pid": os.getpid(),
            "task_id": outcome.task_id,
            "status": str(outcome.status),
            "reason": str(outcome.reason),
            "decided_by": record.decided_by,
            "decisions": record.decisions,
            "counters": counters(store, outcome.task_id),
            "final_output": getattr(outcome.result, "final_output", None),
        }
    finally:
        store.close()


def _say(step: str, data: dict[str, Any]) -> None:
    c = data["counters"]
    print(
        f"{step} (process {data['pid']}): {data['status']}/{data['reason']}; model turns "
        f"{c['models']}/{c['model_turns']}, tool executions {c['tools']}/{c['tool_executions']}"
    )


def _start_server(db: str, port: int, token: str, folder: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LOOPGUARD_SERVER_TOKENS": f"you:operator:{token}"}
    log = (folder / "serve.log").open("wb")
    command = [sys.executable, "-m", "agents_loopguard.cli", "--db", db, "serve", "--port", str(port)]
    return subprocess.Popen([*command, "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT, env=env)


def _approve_over_api(port: int, token: str, pause_id: str) -> None:
    import httpx

    url = f"http://127.0.0.1:{port}/api/v1/pauses/{pause_id}/decisions"
    for _ in range(100):
        try:
            answer = httpx.post(url, headers={"Authorization": f"Bearer {token}"}, json={"decision": "approve"})
            break
        except httpx.HTTPError:
            time.sleep(0.2)
    answer.raise_for_status()
    print(f"2. approved through the API as {answer.json()['decided_by']!r} (the console's Approve button does this)")


def walk_through(note: str, port: int, auto: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = f"sqlite:///{folder / 'loopguard.db'}"
        token = secrets.token_urlsafe(32)
        token_file = folder / "operator-token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        server = _start_server(db, port, token, folder)
        try:
            paused = pause(db, f"support-ticket-{uuid.uuid4().hex[:6]}", note)
            _say("1. paused", paused)
            if auto:
                _approve_over_api(port, token, paused["pause_id"])
            else:
                print(f"2. open http://127.0.0.1:{port}/ and log in with the token in {token_file};")
                print("   approve the refund in the inbox (waiting up to 10 minutes)")
            child = [sys.executable, __file__, "resume", "--db", db, paused["pause_id"], "--wait", "600", "--json"]
            resumed = json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout)
            _say("3. resumed", resumed)
            print(f"   decided by {resumed['decided_by']}: {resumed['decisions']}; {resumed['final_output']!r}")
        finally:
            server.terminate()
            server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("pause", help="run until the refund waits for approval")
    one.add_argument("--db", required=True)
    one.add_argument("--task", default=f"support-ticket-{uuid.uuid4().hex[:6]}")
    one.add_argument("--note", default="My order 42 arrived broken.")
    one.add_argument("--json", action="store_true")
    two = sub.add_parser("resume", help="wait for the decision, then resume the pause here")
    two.add_argument("--db", required=True)
    two.add_argument("pause_id")
    two.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the decision")
    two.add_argument("--json", action="store_true")
    parser.add_argument("--note", default="My order 42 arrived broken. <script>alert('pwned')</script>")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--auto", action="store_true", help="approve through the API instead of a browser")
    args = parser.parse_args()
    if args.command == "pause":
        data = pause(args.db, args.task, args.note)
    elif args.command == "resume":
        data = resume(args.db, args.pause_id, args.wait)
    else:
        walk_through(args.note, args.port, args.auto)
        return
    if args.json:
        print(json.dumps(data))
    else:
        _say("paused" if args.command == "pause" else "resumed", data)
        if args.command == "pause":
            print(f"pause {data['pause_id']}: approve it in the console, then run the resume step")


if __name__ == "__main__":
    main()
