"""Operation ids from canonical arguments (R20; issue 28 item 2).

A write's declared ``operation_id(args)`` gets the arguments after validation in their canonical (RFC 8785) form, so
``80`` / ``80.0`` / ``8e1`` and any key order name one operation and the refund runs once; a declared callable that
names the same arguments twice differently in one task (a clock, a counter, a random part) is refused
(``operation_conflict``), never trusted. Bodies are counted where they run. Every adapter's door is a row of the
conformance kit (``tests/conformance/doors_canonical.py``); these tests pin the rule itself.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents_loopguard import Budget, Guard, OperationState, Reason, Status, Verdict
from agents_loopguard.function_calling import GuardedTool
from agents_loopguard.run import declare_tool
from agents_loopguard.store import Store
from agents_loopguard.values.calls import Call, canonical_args
from agents_loopguard.values.canonical import canonical_json
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, tool_call
from tests.support.shop import run_loop
from tests.support.wire import scripted_server

pytestmark = pytest.mark.timeout(60)
server = pytest.fixture(scripted_server, name="server")

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: abs(f) < 2**53 or not f.is_integer()),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_r20_canonical_arguments_are_what_rfc_8785_reads_back_and_a_fixed_point(args: dict[str, Any]) -> None:
    """R5, R20: any JSON object: its canonical arguments have the same canonical JSON (the same call), are their own
    canonical form, and do not depend on key order."""
    canonical = canonical_args(args)
    assert canonical_json(canonical) == canonical_json(args)
    assert canonical_args(canonical) == canonical
    assert canonical_args(dict(reversed(list(args.items())))) == canonical


@pytest.mark.parametrize(
    "raw",
    [
        '{"order_id": "A-17", "amount": 80}',
        '{"order_id": "A-17", "amount": 80.0}',
        '{"amount": 80.0, "order_id": "A-17"}',
        '{"order_id": "A-17", "amount": 8e1}',
        '{"amount": 800e-1, "order_id": "A-17"}',
    ],
)
def test_r20_a_declared_operation_id_gets_the_canonical_arguments(raw: str) -> None:
    """R20: the issue's callable, which formats the amount itself, names one operation for every spelling."""
    spec = declare_tool(
        "refund",
        kind="write",
        operation_id=lambda a: f"refund-{a['order_id']}-{a['amount']}",
        verify=lambda a, out: {"revision": 1, "done": True, "effect": "committed"},
    )
    assert spec.operation_of(json.loads(raw)) == "refund-A-17-80"


def test_r20_arguments_json_cannot_carry_name_no_operation() -> None:
    """R5: a NaN names nothing (the call is refused as invalid before any id is trusted)."""
    spec = declare_tool("refund", kind="write", operation_id=lambda a: "refund-1", verify=lambda a, out: None)
    named = spec.operation_of({"amount": float("nan")})
    assert not isinstance(named, str) and named is not None and "not JSON data" in named.why


class Refunds:
    """The payment provider: each refund body that really ran."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def refund(self, order_id: str, amount: float) -> str:
        self.sent.append((order_id, amount))
        return f"refunded {amount} on {order_id}"

    def tool(self, operation_id: Any) -> GuardedTool:
        number = {"type": "number"}
        return GuardedTool(
            "refund",
            self.refund,
            parameters={"type": "object", "properties": {"order_id": {"type": "string"}, "amount": number}},
            kind="write",
            operation_id=operation_id,
            verify=lambda a, out: {"revision": 1, "done": False, "effect": "committed"},
        )


def _run(server: ScriptedOpenAIServer, store: Store, tool: GuardedTool, task_id: str) -> Any:
    """The raw function-calling loop, the real openai client over HTTP against the scripted server."""
    return run_loop(server, "chat", "sync", tools=[tool], budget=Budget(6, 6), store=store, task_id=task_id)


def test_r20_the_issues_two_proposals_run_the_refund_once(server: ScriptedOpenAIServer, store: Store) -> None:
    """R20: ``80`` then ``80.0`` (keys reordered), over HTTP through the raw loop: one body, one committed
    operation named from the canonical amount; the second proposal gets the stored result."""
    provider = Refunds()
    server.add(
        tool_call("refund", '{"order_id": "A-17", "amount": 80}'),
        tool_call("refund", '{"amount": 80.0, "order_id": "A-17"}'),
        final_text("Refunded."),
    )
    outcome = _run(server, store, provider.tool(lambda a: f"refund-{a['order_id']}-{a['amount']}"), "t-80")
    assert provider.sent == [("A-17", 80)]
    assert [op.operation_id for op in store.operations("t-80")] == ["refund-A-17-80"]
    assert store.lookup_operation("refund-A-17-80").state is OperationState.COMMITTED  # type: ignore[union-attr]
    assert (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)


def test_r20_a_callable_naming_the_same_arguments_twice_is_refused_not_trusted(
    server: ScriptedOpenAIServer, store: Store
) -> None:
    """R20: an id with a counter in it names the same refund twice: the second is refused ``operation_conflict``
    with the reason, and the refund ran once."""
    provider, counter = Refunds(), itertools.count(1)
    server.add(
        tool_call("refund", '{"order_id": "A-17", "amount": 80}'),
        tool_call("refund", '{"order_id": "A-17", "amount": 80.0}'),
        final_text("Refunded twice?"),
    )
    outcome = _run(server, store, provider.tool(lambda a: f"refund-{a['order_id']}-{next(counter)}"), "t-count")
    assert provider.sent == [("A-17", 80)]
    assert (outcome.status, outcome.reason, outcome.operation_id) == (
        Status.STOPPED,
        Reason.OPERATION_CONFLICT,
        "refund-A-17-2",
    )
    assert "named these arguments 'refund-A-17-1' before and 'refund-A-17-2' now" in outcome.detail


def test_r20_the_rule_holds_for_a_later_guard_of_the_task(store: Store) -> None:
    """R16, R20: a later guard of the task (another run, another worker) reads the task's ledger: a new id for
    arguments the task already wrote is refused there too."""

    def refund(args: dict[str, Any], operation_id: str) -> Call:
        return Call("refund", args, "write", operation_id, named_by_args=True)

    first = Guard(budget=Budget(9, 9), store=store, task_id="t-later")
    ticket = first.authorize(refund({"order_id": "A-17", "amount": 80}, "refund-1"))
    assert not isinstance(ticket, Verdict)
    first.settle(ticket, {"status": "ok"}, evidence={"revision": 1, "done": False, "effect": "committed"})
    later = Guard(budget=Budget(9, 9), store=store, task_id="t-later")
    verdict = later.authorize(refund({"amount": 80.0, "order_id": "A-17"}, "refund-2"))
    assert isinstance(verdict, Verdict) and verdict.reason is Reason.OPERATION_CONFLICT
    replay = later.authorize(refund({"amount": 80.0, "order_id": "A-17"}, "refund-1"))
    assert not isinstance(replay, Verdict) and replay.replay  # the same id: the stored result, never a second body


def test_ids_given_with_a_proposal_are_the_callers_own_as_in_the_articles_prototype() -> None:
    """SPEC's reference semantics: the engine API's explicit ids (the prototype's) are not derived, so two ids for
    one payload are two operations there, as in the article."""
    guard = Guard(budget=Budget(9, 9))
    for op in ("order-42-a", "order-42-b"):
        ticket = guard.authorize({"tool": "save", "kind": "write", "operation_id": op, "args": {"amount": 5}})
        assert not isinstance(ticket, Verdict), ticket
        guard.settle(ticket, {"status": "ok"}, evidence={"revision": 1, "done": False, "effect": "committed"})
    assert guard.used.tools == 2
