"""R10, R20: a write whose answer was lost is settled by asking the receiver with its tool's read-only probe.

The receiver is real: a SQLite file of refunds keyed by the operation id, written by the tool's body and read by
its probe. Every adapter runs the same scripted model (the Agents SDK run, streamed and attached; the raw loop over
Chat Completions and Responses; LangChain sync and async; Google ADK). The test counts the bodies that really ran
and the refunds the receiver really holds, and reads the ledger and its transitions back from the store.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, MemoryStore, OperationState
from agents_loopguard.values.probes import NOT_COMMITTED, UNKNOWN, committed, not_committed
from tests.support.adapters import ADAPTERS, Calls, Say, Tool, run_scenario

pytestmark = pytest.mark.timeout(240)


class Receiver:
    """The refund provider: one row per refund, keyed by the operation id the write names."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE refunds (operation_id TEXT PRIMARY KEY, order_id TEXT, amount REAL)")

    def refund(self, operation_id: str, order_id: str, amount: float) -> str:
        with sqlite3.connect(self.path) as db:
            db.execute("INSERT INTO refunds VALUES (?, ?, ?)", (operation_id, order_id, amount))
        return f"r-{order_id}"

    def find(self, operation_id: str) -> str | None:
        with sqlite3.connect(self.path) as db:
            row = db.execute("SELECT order_id FROM refunds WHERE operation_id = ?", (operation_id,)).fetchone()
        return None if row is None else f"r-{row[0]}"

    def refunds(self) -> int:
        with sqlite3.connect(self.path) as db:
            return int(db.execute("SELECT count(*) FROM refunds").fetchone()[0])


class Provider:
    """The refund tool's body and probe, against one receiver; ``plan`` says how each body call goes: ``lost``
    (the refund is made, its answer lost), ``refused`` (the connection fails before anything is sent), else ok."""

    def __init__(self, receiver: Receiver, plan: list[str], probe: str = "asks") -> None:
        self.receiver, self.plan, self.probe_mode = receiver, plan, probe
        self.bodies = 0
        self.probes = 0

    def tool(self) -> Tool:
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.bodies += 1
            step = self.plan.pop(0) if self.plan else "ok"
            if step == "refused":
                raise ConnectionError("connection refused: nothing was sent")
            receipt = self.receiver.refund(f"refund-{order_id}", order_id, amount)
            if step == "lost":
                raise TimeoutError("the provider's answer was lost")
            return receipt

        return Tool(
            refund,
            kind="write",
            operation_id=lambda a: f"refund-{a['order_id']}",
            verify=lambda a, out: (
                {"revision": 1, "done": True, "effect": "committed"}
                if out == f"r-{a['order_id']}"
                else {"revision": 0, "done": False, "effect": "unknown"}
            ),
            probe=self.ask,
        )

    def ask(self, operation_id: str, args: dict[str, Any]) -> Any:
        self.probes += 1
        if self.probe_mode == "unknown":
            return UNKNOWN
        if self.probe_mode == "raises":
            raise ConnectionError("the provider's status API is down")
        if self.probe_mode == "garbage":
            return {"found": True}
        receipt = self.receiver.find(operation_id)
        if receipt is None:
            return not_committed(evidence=f"no refund {operation_id} at the provider")
        return committed(receipt, evidence=f"refund {receipt} found for {args['order_id']}")


STEPS = [Calls(("refund", {"order_id": "A-17", "amount": 80})), Say("refunded")]


ROOMY = Budget(4, 6)


def run(adapter: str, provider: Provider, budget: Budget = ROOMY) -> tuple[Any, MemoryStore]:
    store = MemoryStore()
    outcome = run_scenario(adapter, STEPS, [provider.tool()], budget=budget, store=store, task_id="t-probe").outcome
    return outcome, store


def settled_by_probe(store: MemoryStore) -> list[tuple[str, str, str | None]]:
    return [(t.kind, t.who, t.operation_id) for t in store.transitions("t-probe")]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_r20_a_lost_answer_the_receiver_has_completes_with_one_body_and_no_human(adapter: str, tmp_path: Path) -> None:
    receiver = Receiver(tmp_path / "provider.db")
    provider = Provider(receiver, ["lost"])
    outcome, store = run(adapter, provider)
    assert (str(outcome.status), str(outcome.reason)) == ("completed", "validated_done")
    assert (provider.bodies, receiver.refunds(), provider.probes) == (1, 1, 1)
    (op,) = store.operations("t-probe")
    assert (op.state, op.result) == (OperationState.COMMITTED, {"status": "ok", "output": "r-A-17"})
    assert settled_by_probe(store) == [("reconcile", "probe:refund", "refund-A-17")]
    (answer,) = store.transitions("t-probe")
    assert answer.why == "refund r-A-17 found for A-17" and answer.at > 0
    assert outcome.used.tools == 2  # the body and the probe, each reserved


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_r20_a_write_the_receiver_never_got_is_sent_once_more(adapter: str, tmp_path: Path) -> None:
    receiver = Receiver(tmp_path / "provider.db")
    provider = Provider(receiver, ["refused"])
    outcome, store = run(adapter, provider)
    assert (str(outcome.status), str(outcome.reason)) == ("completed", "validated_done")
    assert (provider.bodies, receiver.refunds(), provider.probes) == (2, 1, 1)
    (op,) = store.operations("t-probe")
    assert (op.state, op.attempts) == (OperationState.COMMITTED, 2)
    assert settled_by_probe(store) == [("reconcile", "probe:refund", "refund-A-17")]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_r20_not_committed_allows_one_new_attempt_only(adapter: str, tmp_path: Path) -> None:
    receiver = Receiver(tmp_path / "provider.db")
    provider = Provider(receiver, ["refused", "refused", "refused"])
    outcome, store = run(adapter, provider)
    assert (provider.bodies, receiver.refunds(), provider.probes) == (2, 0, 2)
    assert str(outcome.status) == "stopped", outcome  # nothing is unknown: the receiver proved it twice
    (op,) = store.operations("t-probe")
    assert op.state is OperationState.NOT_COMMITTED


@pytest.mark.parametrize("mode", ["unknown", "raises", "garbage"])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_r20_a_probe_that_cannot_say_leaves_the_write_unknown(adapter: str, mode: str, tmp_path: Path) -> None:
    receiver = Receiver(tmp_path / "provider.db")
    provider = Provider(receiver, ["lost"], probe=mode)
    outcome, store = run(adapter, provider)
    assert (str(outcome.status), outcome.operation_id) == ("needs_reconciliation", "refund-A-17")
    assert (provider.bodies, receiver.refunds(), provider.probes) == (1, 1, 2)  # Policy.max_probes
    (op,) = store.operations("t-probe")
    assert op.state is OperationState.UNKNOWN
    assert store.transitions("t-probe") == []
    probes = [e.result_class for e in store.trace("t-probe") if e.kind == "probe"]
    expected = "probe_unknown" if mode == "unknown" else "probe_invalid"
    assert probes == [expected, expected, "probe_refused"]


def test_r20_a_probe_is_bounded_by_the_task_budget(tmp_path: Path) -> None:
    receiver = Receiver(tmp_path / "provider.db")
    provider = Provider(receiver, ["lost"])
    outcome, store = run("chat", provider, budget=Budget(4, 1))
    assert (str(outcome.status), provider.bodies, provider.probes) == ("needs_reconciliation", 1, 0)
    assert store.operations("t-probe")[0].state is OperationState.UNKNOWN


def test_the_probe_answers_are_checked() -> None:
    from agents_loopguard.run import declare_tool

    with pytest.raises(ValueError, match="kind='write' only"):
        declare_tool("lookup", probe=lambda op, a: NOT_COMMITTED)
