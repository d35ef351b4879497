"""What the server tests share: the tokens they configure, and tasks made by the real guard (a paused SDK run, a
write whose result was lost, a task stopped by its budget)."""

from __future__ import annotations

from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, function_call

from agents_loopguard import Budget, Reason, Status, create_runner
from agents_loopguard.sdk import guarded_tool, run_guarded_sync
from agents_loopguard.server import ServerConfig, Tokens
from agents_loopguard.store.base import Store

set_tracing_disabled(True)

SECRETS = {
    "ana": "ana-operator-secret-4f9d2c7be1a3",
    "bob": "bob-operator-secret-8a1e5d3f7c2b",
    "n8n": "n8n-workflow-secret-2b7c9e4a6d1f",
}
"""Token secrets by name: ana and bob are operators, n8n a workflow token for ``orders-sync`` and ``billing``."""
TOKENS = Tokens.parse(
    f"ana:operator:{SECRETS['ana']}\nbob:operator:{SECRETS['bob']}\nn8n:workflow:{SECRETS['n8n']}:orders-sync,billing"
)
CONFIG = ServerConfig(tokens=TOKENS)
PLANTED = "sk-planted-secret-0123456789abcdef"
"""A credential planted in tool arguments: no page and no answer may show it."""


def bearer(name: str) -> dict[str, str]:
    """The Authorization header of the named token."""
    return {"Authorization": f"Bearer {SECRETS[name]}"}


def _no_effect(args: dict[str, Any], output: Any) -> dict[str, Any]:
    return {"revision": 1, "done": True, "effect": "committed"}


@guarded_tool(kind="write", operation_id=lambda a: f"refund-order-{a['order']}", verify=_no_effect, needs_approval=True)
def refund(order: int, note: str, api_key: str = "") -> str:
    """Refund an order (a human approves every refund)."""
    return f"refunded {order}"


def paused_task(store: Store, task_id: str, *, note: str = "damaged", calls: int = 1) -> str:
    """Run a real guarded SDK run that pauses on ``calls`` refunds needing approval; return the pause id."""
    proposals = [
        function_call("refund", {"order": 40 + n, "note": note, "api_key": PLANTED}, call_id=f"call-{n}")
        for n in range(calls)
    ]
    agent = Agent(name="clerk", model=ScriptedModel([proposals]), tools=[refund])
    outcome = run_guarded_sync(
        agent, "refund", budget=Budget(model_turns=4, tool_executions=4), store=store, task_id=task_id
    )
    assert outcome.status is Status.NEEDS_HUMAN and outcome.pause_id, outcome
    return outcome.pause_id


def lost_write(store: Store, task_id: str, operation_id: str) -> None:
    """A write whose answer was lost: the task ends needs_reconciliation with the operation unknown."""

    def lost(call: Any) -> Any:
        raise TimeoutError("no response")

    pay = {"tool": "pay", "kind": "write", "operation_id": operation_id, "args": {"amount": 5}}
    run = create_runner(budget=Budget(3, 3), store=store, task_id=task_id, execute=lost, verify=lambda c, r: None)
    outcome = run([pay])
    assert outcome.status is Status.NEEDS_RECONCILIATION, outcome


def budget_stopped(store: Store, task_id: str) -> None:
    """A task stopped by its model budget after one turn."""
    run = create_runner(
        budget=Budget(1, 3),
        store=store,
        task_id=task_id,
        execute=lambda c: {"status": "ok"},
        verify=lambda c, r: {"revision": 1, "done": False, "effect": "none"},
    )
    read = {"tool": "search", "kind": "read", "args": {"q": "x"}}
    outcome = run([read, {**read, "args": {"q": "y"}}])
    assert (outcome.status, outcome.reason) == (Status.STOPPED, Reason.MODEL_BUDGET), outcome
