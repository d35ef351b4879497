"""The same scripted scenarios through every adapter, on every store: the outcomes and counters must agree.

tests/test_run_rules.py checks each adapter against the rule it expects; this test compares the adapters with one
another on a real SQLite file and the real PostgreSQL server too (the task's counters and its ledger in the store the
outcome was read from). What an adapter differs in by design is pinned in the matrix, not here: these scenarios are
the ones every framework runs identically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, MemoryStore, Store
from agents_loopguard.store.sql import SQLStore
from tests.support.adapters import ADAPTERS, Calls, Fail, Say, Tool, run_scenario

pytestmark = pytest.mark.timeout(240)

ran: list[str] = []
namespace = [""]
"""Each adapter's writes name their own operations (``<adapter>/confirm-42``): the ledger is the store's, shared by
every task in it, so one adapter's committed write would be another's replay."""


def check_order(order: int) -> str:
    """Check an order; checking order 2 finds everything in place."""
    ran.append(f"check-{order}")
    return f"order {order} checked"


def lookup(q: str) -> str:
    """Look something up (the application verifies no progress from it)."""
    ran.append(f"lookup-{q}")
    return f"nothing about {q}"


def confirm(order: int) -> str:
    """Confirm an order (a write; the receiver confirms it committed and the task done)."""
    ran.append(f"confirm-{order}")
    return f"confirmed {order}"


CHECK = Tool(check_order, verify=lambda a, out: {"revision": a["order"], "done": a["order"] >= 2, "effect": "none"})
LOOKUP = Tool(lookup)
CONFIRM = Tool(
    confirm,
    kind="write",
    operation_id=lambda a: f"{namespace[0]}confirm-{a['order']}",
    verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
)
LOST = Tool(
    confirm,
    kind="write",
    operation_id=lambda a: f"{namespace[0]}confirm-{a['order']}",
    verify=lambda a, out: {"revision": 0, "done": False, "effect": "unknown"},
)

SCENARIOS: dict[str, tuple[list[Any], list[Tool], Budget]] = {
    "validated-done": (
        [Calls(("check_order", {"order": 1})), Calls(("check_order", {"order": 2})), Say("done")],
        [CHECK],
        Budget(model_turns=6, tool_executions=6),
    ),
    "identical-loop": ([Calls(("lookup", {"q": "x"}))] * 5, [LOOKUP], Budget(model_turns=8, tool_executions=8)),
    "a-write-once": ([Calls(("confirm", {"order": 42})), Say("confirmed")], [CONFIRM], Budget(4, 4)),
    "lost-answer": ([Calls(("confirm", {"order": 7})), Say("?")], [LOST], Budget(4, 4)),
    "model-budget": ([Calls(("check_order", {"order": 1}))] * 4, [CHECK], Budget(model_turns=2, tool_executions=9)),
    "partial": ([Say("I think it is fine.")], [CHECK], Budget(3, 3)),
    "api-error": ([Fail(401)], [CHECK], Budget(3, 3)),
}


EXPECTED = {
    "validated-done": ("completed", "validated_done", 3, 2),
    "identical-loop": ("stopped", "same_call", 3, 2),
    "a-write-once": ("completed", "validated_done", 2, 1),
    "lost-answer": ("needs_reconciliation", "unknown_commit", 1, 1),
    "model-budget": ("stopped", "model_budget", 2, 2),
    "partial": ("partial", "unverified_final", 1, 0),
    "api-error": ("needs_human", "permission", 1, 0),
}
"""What every adapter must come to (the five outcomes among them): agreeing on something else is no agreement."""


def observed(adapter: str, scenario: str, store: Store) -> dict[str, Any]:
    steps, tools, budget = SCENARIOS[scenario]
    task_id = f"diff-{scenario}-{adapter}"
    namespace[0] = f"{adapter}/"
    ran.clear()
    outcome = run_scenario(adapter, steps, tools, budget=budget, store=store, task_id=task_id).outcome
    task = store.task(task_id)
    assert task is not None
    ops = store.operations(task_id)
    return {
        "status": str(outcome.status),
        "reason": str(outcome.reason),
        "models": outcome.used.models,
        "tools": outcome.used.tools,
        "stored": (task.status, task.used.models, task.used.tools),
        "ledger": sorted((op.operation_id.removeprefix(namespace[0]), str(op.state)) for op in ops),
        "bodies": sorted(ran),
        "operation": (outcome.operation_id or "").removeprefix(namespace[0]),
    }


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLStore(f"sqlite:///{tmp_path / 'differential.db'}")
    return SQLStore(request.getfixturevalue("pg_schema_url"))


@pytest.mark.parametrize("store_kind", ["memory", "sqlite", "postgres"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_adapter_comes_to_the_same_outcome_and_counters(
    scenario: str, store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """R1, R2, R7, R10, R11 across the adapters: the same script gives the same status, reason, counters (in the
    outcome and in the store), ledger states and tool bodies in the Agents SDK adapter (run, streamed, attached),
    the raw loop (Chat Completions, Responses), LangChain (sync, async) and Google ADK."""
    store = _store(store_kind, tmp_path, request)
    try:
        results = {adapter: observed(adapter, scenario, store) for adapter in ADAPTERS}
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()
    first = results[ADAPTERS[0]]
    assert (first["status"], first["reason"], first["models"], first["tools"]) == EXPECTED[scenario]
    assert {adapter: got for adapter, got in results.items() if got != first} == {}, first
