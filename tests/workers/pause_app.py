"""The application's agent code for the approval-pause tests: every process builds its agent from this module.

Nothing here knows about pauses or processes: it is what an application ships (tools, agent, budget), plus the
model's script for each scenario (``agents.testing.ScriptedModel``), split at the approval pause into the turns
before it (``phase="before"``) and after it (``phase="after"``). Each execution of the ``refund`` write appends
one line to the file named by ``$PAUSE_APP_SENT``, so a test counts real executions across processes.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget, Policy
from agents_loopguard.sdk import current_guard, guarded_tool

set_tracing_disabled(True)

SENT_ENV = "PAUSE_APP_SENT"
"""The refund receiver's journal: one line per execution of the write's body."""
HANG_ENV = "PAUSE_APP_HANG"
"""A file the refund's body creates after the receiver got the refund, before it hangs (for a test that kills it)."""


def _journal(line: str) -> None:
    path = os.environ.get(SENT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as journal:
            journal.write(line + "\n")


def executions(path: str | os.PathLike[str]) -> list[str]:
    """The refund executions the receiver saw (lines of ``$PAUSE_APP_SENT``)."""
    try:
        with open(path, encoding="utf-8") as journal:
            return [line.strip() for line in journal if line.strip()]
    except FileNotFoundError:
        return []


@guarded_tool(verify=lambda args, output: {"revision": int(args["n"]), "done": False, "effect": "none"})
def lookup(n: int) -> str:
    """Read page n of the customer's history (page n is progress n)."""
    return f"page {n}"


def _refund_committed(args: dict[str, Any], output: Any) -> dict[str, Any]:
    guard = current_guard()
    return {"revision": guard.revision if guard else 0, "done": False, "effect": "committed"}


@guarded_tool(
    kind="write",
    operation_id=lambda args: f"refund-order-{args['order']}",
    verify=_refund_committed,
    needs_approval=True,
)
def refund(order: int) -> str:
    """Refund an order (a human approves every refund)."""
    _journal(f"refund-order-{order} pid={os.getpid()}")
    if hang := os.environ.get(HANG_ENV):  # the receiver got it; the answer never comes back (the worker is killed)
        Path(hang).touch()
        time.sleep(600)
    return f"refunded order {order}"


def _call(name: str, args: dict[str, Any]) -> list[Any]:
    return [function_call(name, args, call_id=f"call-{uuid.uuid4().hex[:12]}")]  # call ids never repeat


def _refund_again(_call_seen: ModelCall) -> list[Any]:
    return _call("refund", {"order": 5})


SCRIPTS: dict[str, dict[str, list[Any]]] = {
    # four model turns before the pause (three reads, then the refund), then as many as the budget lets it have
    "continue": {
        "before": [
            _call("lookup", {"n": 1}),
            _call("lookup", {"n": 2}),
            _call("lookup", {"n": 3}),
            _call("refund", {"order": 5}),
        ],
        "after": [
            _call("lookup", {"n": 4}),
            _call("lookup", {"n": 5}),
            _call("lookup", {"n": 6}),
            [assistant_message("done")],
        ],
    },
    # a model that asks to refund the same order on every turn, forever
    "forever": {
        "before": [ModelStep.respond(_refund_again) for _ in range(40)],
        "after": [ModelStep.respond(_refund_again) for _ in range(40)],
    },
    # one refund, approved, then the final answer
    "once": {
        "before": [_call("refund", {"order": 7})],
        "after": [[assistant_message("order 7 refunded")]],
    },
}

BUDGETS = {
    "continue": Budget(model_turns=6, tool_executions=10),
    "forever": Budget(model_turns=8, tool_executions=3),
    "once": Budget(model_turns=4, tool_executions=4),
}

POLICIES = {
    # the stall rule would stop "forever" even sooner (replays prove no progress): relax it to show the budget
    "forever": Policy(max_stalled=1000),
}


def build_agent(scenario: str, phase: str) -> Agent[Any]:
    """The clerk agent with the model's turns of ``scenario`` for ``phase`` (``before``/``after`` the pause)."""
    steps = SCRIPTS[scenario][phase]
    return Agent(
        name="clerk",
        instructions="Help the customer; refunds need a human's approval.",
        model=ScriptedModel(list(steps)),
        tools=[lookup, refund],
    )


def policy(scenario: str) -> Policy | None:
    """The application's progress policy for ``scenario`` (None: the defaults)."""
    return POLICIES.get(scenario)
