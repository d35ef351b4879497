"""The loop rules of ``Policy()``'s defaults (R7, R8, R21), each against what it must cut and what it must let run,
through the engine and through adapters (bodies counted); and where they differ from the article's prototype, whose
own rules ``Policy.prototype()`` keeps exactly (the oracle tests run under it).

What the defaults change, scenario by scenario (docs/efficacy.md lists the same):

* a stubborn identical call whose first run advanced the revision: 2 executions (prototype: 3);
* a cycle of calls whose second pass found nothing new: cut before its third pass (prototype: when the stall count
  or the per-revision count reaches its limit, later);
* a transient failure without effect: a retry, no stall and no repetition (prototype: both), bounded by the
  error-storm rule (prototype: none);
* polls: 600 s of pending answers, at most 120 (before: 10 polls, no time bound).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents_loopguard import Budget, Guard, MemoryStore, Policy, Reason, Status, Verdict
from agents_loopguard.run import RetryPolicy, declare_tool
from agents_loopguard.run.retry import TransientToolError
from agents_loopguard.values.calls import Call
from agents_loopguard.values.canonical import fingerprint
from agents_loopguard.values.evidence import UNVERIFIED
from agents_loopguard.values.outcome import allowed_next_actions
from tests.support.adapters import Calls, Say, Tool, run_scenario

pytestmark = pytest.mark.timeout(120)

BUDGET = Budget(model_turns=500, tool_executions=500)
OK = {"status": "ok"}
FAILED = {"status": "retryable", "error": "429 Too Many Requests"}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def ev(revision: int, *, pending: bool = False) -> dict[str, Any]:
    return {"revision": revision, "done": False, "effect": "none", "pending": pending}


def read(tool: str = "search", **args: Any) -> dict[str, Any]:
    return {"tool": tool, "kind": "read", "args": args or {"q": "refunds"}}


def drive(
    guard: Guard, proposals: list[Any], answer: Callable[[int, Any], tuple[Any, Any]]
) -> tuple[Verdict | None, int]:
    """Each proposal through the guard (a model turn, authorize, execute, settle); ``answer(n, proposal)`` is the
    n-th execution's (result, evidence). Returns the verdict that ended it (None: every proposal ran) and the
    executions."""
    ran = 0
    for proposal in proposals:
        verdict = guard.begin_turn()
        ticket = verdict or guard.authorize(proposal)
        if isinstance(ticket, Verdict):
            return ticket, ran
        result, evidence = answer(ran, proposal) if not ticket.replay else (ticket.result, ev(guard.revision))
        ran += 0 if ticket.replay else 1
        verdict = guard.settle(ticket, result, evidence=evidence)
        if verdict is not None:
            return verdict, ran
    return None, ran


def guard(policy: Policy | None = None, clock: Callable[[], float] | None = None) -> Guard:
    return Guard(budget=BUDGET, store=MemoryStore(), policy=policy, **({"clock": clock} if clock else {}))


# --- R7: the same call, and cycles of calls --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [Policy(), Policy.prototype()], ids=["defaults", "prototype"])
def test_r7_r21_a_stubborn_identical_call_runs_twice_even_when_its_first_run_advanced_the_revision(
    policy: Policy,
) -> None:
    """R7, R21: the first search finds a document (revision 1), the next finds nothing new; the defaults refuse the
    third proposal (2 executions), the prototype's rules the fourth (3: its count starts again at revision 1)."""
    verdict, ran = drive(guard(policy), [read()] * 10, lambda n, p: (OK, ev(1)))
    assert verdict is not None and verdict.reason is Reason.SAME_CALL
    assert ran == (3 if policy.max_cycle == 0 else 2)


@pytest.mark.parametrize("adapter", ["chat", "sdk"])
def test_r7_r21_a_stubborn_identical_call_runs_twice_in_the_adapters(adapter: str) -> None:
    """R7, R21: the same through the raw loop over HTTP and the Agents SDK: two bodies run, the third is refused."""
    found: set[str] = set()
    ran: list[str] = []

    def search_docs(query: str) -> list[str]:
        """Search the policy documents."""
        ran.append(query)
        return ["doc-14"]

    def new_documents(args: Any, hits: Any) -> dict[str, Any]:
        found.update(hits if isinstance(hits, list) else ["doc-14"])
        return ev(len(found))

    steps = [Calls(("search_docs", {"query": "refund policy"}))] * 10 + [Say("done")]
    outcome = run_scenario(adapter, steps, [Tool(search_docs, verify=new_documents)], budget=BUDGET).outcome
    assert (outcome.status, outcome.reason, len(ran), outcome.used.tools) == (Status.STOPPED, Reason.SAME_CALL, 2, 2)


def test_r7_a_call_that_makes_progress_every_time_is_never_cut() -> None:
    """R7: the same call 40 times, each answer new (a queue drained batch by batch): nothing stops it."""
    verdict, ran = drive(guard(), [read("next_batch", queue="q")] * 40, lambda n, p: (OK, ev(n + 1)))
    assert (verdict, ran) == (None, 40)


CYCLE_TOOLS = ["search", "fetch", "lookup", "read_order"]


@pytest.mark.parametrize("period", [2, 3, 4])
@pytest.mark.parametrize("verified", ["all", "none", "mixed"])
def test_r7_r21_a_cycle_is_cut_before_its_third_pass_with_or_without_verify(period: int, verified: str) -> None:
    """R7, R21: A, B (, C, D) again and again: the first pass finds something (where verified), the second nothing;
    the third pass is refused before it starts (``cycle``), for tools with and without ``verify``. (A verified
    cycle of three or four calls stalls three times first: ``no_progress`` cuts it as early or earlier.)"""
    block = [read(tool, id=1) for tool in CYCLE_TOOLS[:period]]
    seen: set[str] = set()

    def answer(n: int, proposal: Any) -> tuple[Any, Any]:
        if verified == "none" or (verified == "mixed" and proposal["tool"] != "search"):
            return OK, UNVERIFIED
        seen.add(proposal["tool"])
        return OK, ev(1)  # each tool's own verify: it found its one thing (its own progress key)

    verdict, ran = drive(guard(), block * 10, answer)
    stalls_first = verified == "all" and period >= 3  # three verified results without progress come first
    assert verdict is not None
    assert (verdict.reason, ran) == ((Reason.NO_PROGRESS, period + 3) if stalls_first else (Reason.CYCLE, 2 * period))


def test_r7_under_the_prototypes_rules_a_cycle_runs_until_the_stall_count() -> None:
    """R7: the documented difference: without the repeat rule, A, B, A, B... stops on no_progress, one pass later."""
    block = [read("search"), read("fetch")]
    for policy, expected in ((Policy.prototype(), (Reason.NO_PROGRESS, 5)), (Policy(), (Reason.CYCLE, 4))):
        seen: set[str] = set()

        def answer(n: int, proposal: Any, seen: set[str] = seen, task_wide: bool = policy.task_revision) -> Any:
            seen.add(proposal["tool"])  # the prototype's one revision for the task; else each tool's own count
            return OK, ev(len(seen) if task_wide else 1)

        verdict, ran = drive(guard(policy), block * 10, answer)
        assert verdict is not None and (verdict.reason, ran) == expected


# --- R21: transient failures, error storms -------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [Policy(), Policy.prototype()], ids=["defaults", "prototype"])
def test_r21_transient_failures_are_retries_not_stalls_nor_repetitions(policy: Policy) -> None:
    """R21: a read that fails three times (429), proposed again by the model each time, then succeeds: the defaults
    let it run (4 executions); the prototype's rules refused the third proposal as the same call."""
    results = [FAILED, FAILED, FAILED, OK]
    verdict, ran = drive(guard(policy), [read()] * 4, lambda n, p: (results[n], ev(0)))
    if policy.retry_transient:
        assert (verdict, ran) == (None, 4)
    else:
        assert verdict is not None and (verdict.reason, ran) == (Reason.SAME_CALL, 2)


def test_r21_failures_between_stalls_neither_count_nor_reset_the_stall_count() -> None:
    """R21: verified results without progress stall; a transient failure between them is not one more stall."""
    answers = [(OK, ev(0)), (FAILED, ev(0)), (OK, ev(0)), (FAILED, ev(0)), (OK, ev(0))]
    proposals = [read(q=f"q{n}") for n in range(5)]
    verdict, ran = drive(guard(), proposals, lambda n, p: answers[n])
    assert verdict is not None and (verdict.reason, ran) == (Reason.NO_PROGRESS, 5)


def test_r21_an_error_storm_ends_the_task_with_its_own_reason() -> None:
    """R21: one tool failing again and again, whatever its arguments (the service is down): the fifth failure ends
    the task ``stopped/error_storm``, whose next actions include a bounded retry later."""
    proposals = [read("fetch", id=n % 3) for n in range(20)]
    verdict, ran = drive(guard(), proposals, lambda n, p: (FAILED, ev(0)))
    assert verdict is not None and (verdict.status, verdict.reason, ran) == (Status.STOPPED, Reason.ERROR_STORM, 5)
    assert "bounded_retry" in [str(a) for a in allowed_next_actions(verdict.status, verdict.reason)]


def test_r21_the_error_storm_window_catches_a_tool_that_fails_most_of_the_time() -> None:
    """R21: with a window wider than the limit, failures between successes still add up."""
    answers = [FAILED, OK, FAILED, OK, FAILED, OK]
    policy = Policy(max_failures=3, failure_window=6)
    verdict, ran = drive(guard(policy), [read("fetch", id=n) for n in range(6)], lambda n, p: (answers[n], ev(n)))
    assert verdict is not None and (verdict.reason, ran) == (Reason.ERROR_STORM, 5)
    verdict, ran = drive(guard(), [read("fetch", id=n) for n in range(6)], lambda n, p: (answers[n], ev(n)))
    assert (verdict, ran) == (None, 6), "the defaults count failures in a row"


@pytest.mark.parametrize("adapter", ["chat", "sdk"])
def test_r21_transient_failures_retried_by_the_adapter_and_the_model_complete_the_task(adapter: str) -> None:
    """R21: each record fails twice (a 429, then a timeout) before it is read; the adapter retries once, the model
    proposes it again: no stall, no repetition, the bodies run 3 times per record and the task completes."""
    tries: dict[str, int] = {}
    found: set[str] = set()

    def fetch_record(record_id: str) -> str:
        """Fetch one record."""
        tries[record_id] = tries.get(record_id, 0) + 1
        if tries[record_id] <= 2:
            raise TransientToolError("429 Too Many Requests")
        return f"record {record_id}"

    def verify(args: Any, output: Any) -> dict[str, Any]:
        found.add(args["record_id"])
        return {"revision": len(found), "done": len(found) == 3, "effect": "none"}

    tool = Tool(fetch_record, verify=verify, retry=RetryPolicy(max_retries=1, initial_delay=0.0, jitter=0.0))
    steps = [Calls(("fetch_record", {"record_id": r})) for r in ("a", "a", "b", "b", "c", "c")] + [Say("done")]
    outcome = run_scenario(adapter, steps, [tool], budget=BUDGET).outcome
    assert (outcome.status, outcome.reason) == (Status.COMPLETED, Reason.VALIDATED_DONE)
    assert tries == {"a": 3, "b": 3, "c": 3} and outcome.used.tools == 9


# --- R8: polls, by time first ------------------------------------------------------------------------------------


def poll_until(clock: Clock, seconds: float, polls: int, policy: Policy | None = None) -> tuple[Verdict | None, int]:
    g = guard(policy, clock)
    proposal = {"tool": "job_status", "kind": "poll", "args": {"job": "export-7"}}

    def answer(n: int, p: Any) -> tuple[Any, Any]:
        clock.t += seconds
        return OK, ev(0, pending=True)

    return drive(g, [proposal] * polls, answer)


def test_r8_r21_a_long_poll_within_its_wait_policy_is_not_cut() -> None:
    """R8, R21: 50 pending answers, 10 s apart (500 s): within the default wait of 600 s (before: cut at 10 polls)."""
    assert poll_until(Clock(), 10.0, 50) == (None, 50)
    verdict, ran = poll_until(Clock(), 10.0, 50, Policy(max_polls=10, max_wait=None))
    assert verdict is not None and (verdict.reason, ran) == (Reason.WAIT_BUDGET, 10)


def test_r8_r21_a_poll_that_never_settles_is_cut_by_time_first_and_by_count_in_a_tight_loop() -> None:
    """R8, R21: pending forever, 15 s apart: refused once 600 s passed since the first poll; 0.1 s apart: refused
    at the 121st poll (``max_polls``). Every poll counted against the task's budget."""
    verdict, ran = poll_until(Clock(), 15.0, 200)
    assert verdict is not None and (verdict.reason, ran) == (Reason.WAIT_BUDGET, 40)
    verdict, ran = poll_until(Clock(), 0.1, 200)
    assert verdict is not None and (verdict.reason, ran) == (Reason.WAIT_BUDGET, 120)


# --- R5 and R21: near-duplicates only through declared volatile arguments -------------------------------------------


@pytest.mark.parametrize("adapter", ["chat", "sdk", "langchain"])
@pytest.mark.parametrize("declared", [True, False])
def test_r5_r21_near_duplicates_are_the_same_call_only_through_declared_volatile_args(
    adapter: str, declared: bool
) -> None:
    """R5, R21: a search stamped with the time of each request: declared volatile, the stamps are one call (the
    third is refused, 2 bodies); undeclared, each stamp is another call and only the stall rule cuts it (4 bodies:
    the first finds something, three find nothing). A field that is not declared (the customer) keeps calls apart."""
    ran: list[str] = []

    def search_tickets(query: str, customer: int, requested_at: str) -> list[str]:
        """Search a customer's tickets."""
        ran.append(requested_at)
        return [f"ticket-{customer}"]

    found: set[str] = set()

    def verify(args: Any, output: Any) -> dict[str, Any]:
        found.add(f"ticket-{args['customer']}")
        return ev(len(found))

    volatile = ("requested_at",) if declared else ()
    tool = Tool(search_tickets, verify=verify, volatile_args=volatile)
    calls = [Calls(("search_tickets", {"query": "open", "customer": 7, "requested_at": f"10:0{n}"})) for n in range(9)]
    outcome = run_scenario(adapter, [*calls, Say("done")], [tool], budget=BUDGET).outcome
    expected = (Reason.SAME_CALL, 2) if declared else (Reason.NO_PROGRESS, 4)
    assert (outcome.reason, len(ran)) == expected
    other = [Calls(("search_tickets", {"query": "open", "customer": c, "requested_at": "10:00"})) for c in (1, 2)]
    ran.clear()
    outcome = run_scenario(adapter, [*other, Say("done")], [tool], budget=BUDGET).outcome
    assert (outcome.status, len(ran)) == (Status.PARTIAL, 2), "another customer is another call"


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3)),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=4,
)
arguments = st.dictionaries(st.sampled_from(["q", "customer", "amount", "ts", "trace"]), json_values, max_size=5)


@given(arguments, arguments, st.sets(st.sampled_from(["ts", "trace"])))
def test_r5_a_calls_identity_drops_only_the_declared_arguments(
    a: dict[str, Any], b: dict[str, Any], volatile: set[str]
) -> None:
    """R5: two calls have one identity exactly when they agree on every argument that is not declared volatile."""
    declared = tuple(sorted(volatile))
    same = fingerprint("t", Call("t", a, volatile=declared).identity()) == fingerprint(
        "t", Call("t", b, volatile=declared).identity()
    )
    kept = {k for k in a.keys() | b.keys() if k not in volatile}
    agree = all(k in a and k in b and fingerprint("v", {"v": a[k]}) == fingerprint("v", {"v": b[k]}) for k in kept)
    assert same == agree


def test_r5_volatile_arguments_come_from_the_declaration_and_must_be_names() -> None:
    """R5: ``volatile_args`` is checked when the tool is declared (a string is not a tuple of names)."""
    with pytest.raises(ValueError, match="volatile_args"):
        declare_tool("search", volatile_args="requested_at")  # type: ignore[arg-type]
    assert declare_tool("search", volatile_args=["requested_at"]).volatile_args == ("requested_at",)


# --- the policy itself -------------------------------------------------------------------------------------------


def test_r21_policy_validates_its_thresholds_and_the_prototype_keeps_the_articles_rules() -> None:
    """R21: 0 turns the repeat and error-storm rules off, never a count rule; the prototype's policy is the
    article's two repetitions and three results without progress, with no rule of its own added."""
    for bad in ({"max_cycle": -1}, {"max_failures": -1}, {"failure_window": 0}, {"shadow": "yes"}):
        with pytest.raises(ValueError):
            Policy(**bad)
    proto = Policy.prototype()
    assert (proto.max_same_call, proto.max_stalled, proto.max_cycle, proto.max_failures) == (2, 3, 0, 0)
    assert not proto.retry_transient and dataclasses.replace(proto, shadow=True).shadows("x")
