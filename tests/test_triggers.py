"""Trigger re-entry (R15): a flow's own write re-activates it; the store recognizes the chain and stops it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, MemoryStore, Outcome, Reason, Status, Store, Verdict
from agents_loopguard.ops.triggers import TriggerGuard
from agents_loopguard.store.base import Activation
from agents_loopguard.values.calls import Call

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "trigger_reentry.py"

_spec = importlib.util.spec_from_file_location("trigger_reentry_example", EXAMPLE)
assert _spec is not None and _spec.loader is not None
example: Any = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = example  # dataclasses look their module up while the class is built
_spec.loader.exec_module(example)


def sql_store_available() -> bool:
    try:
        from agents_loopguard.store.sql import SQLStore  # noqa: F401
    except ImportError:
        return False
    return True


def write_once(store: Store, trigger: TriggerGuard, activation: Activation, operation_id: str) -> Outcome:
    """A guarded write with a stable operation id, run as the activation's task."""
    guard = trigger.guard(activation, budget=Budget(model_turns=0, tool_executions=1))
    write_id = trigger.operation_id(operation_id)  # the flow's namespace (R18)
    ticket = guard.authorize(Call("save_row", {"row": operation_id}, kind="write", operation_id=write_id))
    assert not isinstance(ticket, Verdict)
    verdict = guard.settle(ticket, {"status": "ok"}, lambda c, r: {"revision": 1, "done": True, "effect": "committed"})
    assert verdict is not None
    return guard.end(verdict)


def test_the_example_flow_stops_its_own_echo() -> None:
    """The row written by activation 1 fires the flow again; that activation is refused before anything runs.

    Rules: R15 (re-entry across executions).
    """
    store, rows = MemoryStore(), example.Rows()
    rows.add_order(42)
    trigger = TriggerGuard(store, flow="orders-sync", max_depth=0)
    handled = example.deliver(trigger, rows, limit=10)

    assert [(o.status, o.reason) for _, o in handled] == [
        (Status.COMPLETED, Reason.VALIDATED_DONE),
        (Status.STOPPED, Reason.TRIGGER_CHAIN),
    ]
    (first, done), (echo, stopped) = handled
    assert first.origin_operation_id is None
    assert echo.origin_operation_id == "flow:orders-sync:order-42:sync-v1"  # the row carries the write's id
    assert stopped.operation_id == echo.origin_operation_id
    assert stopped.task_id == "orders-sync:" + echo.event_id
    assert stopped.used.tools == 0 and "max_depth=0" in stopped.detail
    assert rows.order(42) == (2, "synced")  # exactly one write: the echo never reached the tool
    assert rows.next_change() is None  # and so the chain ended
    # The write belongs to the first activation's task: that is how the store recognized the echo.
    (op,) = store.operations()
    assert (op.operation_id, op.task_id, str(op.state)) == (echo.origin_operation_id, done.task_id, "committed")
    # The refusal is a finished task an operator can read like any other stop.
    snapshot = store.task(stopped.task_id)
    assert snapshot is not None and snapshot.outcome is not None
    assert snapshot.outcome["reason"] == "trigger_chain"
    assert [(a.depth, a.granted, a.chain_id) for a in store.activations("orders-sync")] == [
        (0, True, done.task_id),
        (1, False, done.task_id),
    ]


def test_chain_budget_lives_in_the_store_not_in_the_guard_object() -> None:
    """With max_depth=2 the chain may re-enter twice; a fresh TriggerGuard per activation (a new process's view)
    still refuses the third re-entry, because the depth is counted from the store.

    Rules: R15 (re-entry across executions).
    """
    store, rows = MemoryStore(), example.Rows()
    rows.add_order(42)
    outcomes = []
    while (change := rows.next_change()) is not None and len(outcomes) < 10:
        trigger = TriggerGuard(store, flow="orders-sync", max_depth=2)  # nothing carried over between activations
        outcomes.append(example.sync_order(trigger, rows, change))
        rows.delivered(change)
    assert [o.reason for o in outcomes] == [Reason.VALIDATED_DONE] * 3 + [Reason.TRIGGER_CHAIN]
    assert [a.depth for a in store.activations()] == [0, 1, 2, 3]
    assert len({a.chain_id for a in store.activations()}) == 1
    assert rows.order(42) == (4, "synced")


def test_same_event_delivered_twice_runs_once() -> None:
    store, rows = MemoryStore(), example.Rows()
    rows.add_order(42)
    trigger = TriggerGuard(store, flow="orders-sync")
    change = rows.next_change()
    assert change is not None
    first = example.sync_order(trigger, rows, change)
    again = example.sync_order(trigger, rows, change)  # at-least-once delivery
    assert first.reason is Reason.VALIDATED_DONE
    assert (again.status, again.reason, again.task_id) == (first.status, first.reason, first.task_id)
    assert rows.order(42) == (2, "synced")
    assert len(store.activations()) == 1

    rows.delivered(change)
    echo = rows.next_change()
    assert echo is not None and echo.origin_operation_id is not None
    refused = example.sync_order(trigger, rows, echo)
    refused_again = example.sync_order(trigger, rows, echo)
    assert refused.reason is refused_again.reason is Reason.TRIGGER_CHAIN
    assert rows.order(42) == (2, "synced")


def test_activations_not_caused_by_the_flow_start_new_chains() -> None:
    store = MemoryStore()
    orders = TriggerGuard(store, flow="orders-sync")
    billing = TriggerGuard(store, flow="billing")
    first = orders.activate("evt-1")
    assert isinstance(first, Activation)
    write_once(store, orders, first, "op-1")

    unknown = orders.activate("evt-2", origin_operation_id="written-by-someone-else")
    other_flow = billing.activate("evt-1", origin_operation_id=orders.operation_id("op-1"))
    assert isinstance(unknown, Activation) and (unknown.depth, unknown.granted) == (0, True)
    # Another flow reacting to our write is not its own re-entry (it joins our chain); the same event id is a
    # distinct activation there.
    assert isinstance(other_flow, Activation) and (other_flow.depth, other_flow.granted) == (0, True)
    assert other_flow.activation_id == "billing:evt-1" and other_flow.chain_id == first.chain_id


def test_a_ping_pong_between_two_flows_is_stopped_at_the_trigger() -> None:
    """Rules: R15 (re-entry across executions)."""
    store = MemoryStore()
    orders = TriggerGuard(store, flow="orders-sync", max_depth=0)
    billing = TriggerGuard(store, flow="billing", max_depth=0)
    first = orders.activate("evt-1")
    assert isinstance(first, Activation)
    write_once(store, orders, first, "row-42")
    invoice = billing.activate("evt-2", origin_operation_id=orders.operation_id("row-42"))
    assert isinstance(invoice, Activation) and invoice.granted
    write_once(store, billing, invoice, "invoice-42")
    echo = orders.activate("evt-3", origin_operation_id=billing.operation_id("invoice-42"))
    assert isinstance(echo, Outcome) and echo.reason is Reason.TRIGGER_CHAIN


def test_guard_of_an_activation_uses_its_id_as_task_id_and_refuses_a_refused_one() -> None:
    store = MemoryStore()
    trigger = TriggerGuard(store, flow="orders-sync", max_depth=0)
    first = trigger.activate("evt-1")
    assert isinstance(first, Activation)
    assert trigger.guard(first, budget=Budget(model_turns=1, tool_executions=1)).task_id == "orders-sync:evt-1"
    write_once(store, trigger, first, "op-1")
    echo = trigger.activate("evt-2", origin_operation_id="op-1")  # an id outside every namespace: the flow's own
    assert isinstance(echo, Outcome)
    refused = store.activations()[-1]
    with pytest.raises(ValueError, match="refused"):
        trigger.guard(refused, budget=Budget(model_turns=1, tool_executions=1))
    with pytest.raises(ValueError, match="max_depth"):
        TriggerGuard(store, flow="x", max_depth=-1)


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.skipif(not sql_store_available(), reason="agents_loopguard.store.sql.SQLStore is not importable yet")
def test_echo_is_recognized_across_two_processes_with_a_sqlite_store(tmp_path: Path) -> None:
    """Process 1 handles the external change and writes; process 2 receives the echo and refuses it.

    Rules: R15 (re-entry across executions), R16 (many workers).
    """
    url = f"sqlite:///{tmp_path / 'loopguard.db'}"
    rows = str(tmp_path / "rows.db")

    def run(*extra: str) -> list[dict[str, Any]]:
        cmd = [sys.executable, str(EXAMPLE), "--store", url, "--rows", rows, "--deliver", "1", "--json", *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=50, cwd=ROOT, check=False)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    (first,) = run("--seed")
    (echo,) = run()
    assert (first["record"]["status"], first["record"]["reason"]) == ("completed", "validated_done")
    assert echo["origin"] == "flow:orders-sync:order-42:sync-v1"
    assert (echo["record"]["status"], echo["record"]["reason"]) == ("stopped", "trigger_chain")
    assert echo["record"]["operation_id"] == echo["origin"]
    assert example.Rows(rows).order(42) == (2, "synced")
