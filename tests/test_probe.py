"""R10, R20: a write whose answer was lost is settled by asking the receiver with its tool's read-only probe.

The receiver is real: a SQLite file of refunds keyed by the operation id, written by the tool's body and read by
its probe. Every adapter runs the same scripted model (the Agents SDK run, streamed and attached; the raw loop over
Chat Completions and Responses; LangChain sync and async; Google ADK). The test counts the bodies that really ran
and the refunds the receiver really holds, and reads the ledger and its transitions back from the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, MemoryStore, OperationState
from agents_loopguard.values.probes import NOT_COMMITTED
from tests.support.adapters import ADAPTERS, Calls, Say, run_scenario
from tests.support.receiver import Provider, Receiver

pytestmark = pytest.mark.timeout(240)


STEPS: list[Any] = [Calls(("refund", {"order_id": "A-17", "amount": 80})), Say("refunded")]


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
