"""The pause digest covers the operator's decisions: a database writer cannot flip reject to approve unnoticed, and
with a key (LOOPGUARD_PAUSE_KEY or key=) cannot forge a digest either. On SQLite and PostgreSQL, tampering with the
real columns."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents_loopguard import Budget, Guard
from agents_loopguard.ops.approvals import (
    PAUSE_KEY_ENV,
    PauseKeyMissing,
    PauseTampered,
    claim_for_resume,
    decide,
    decisions_digest,
    decisions_for,
    load_for_resume,
    pause_digest,
)
from agents_loopguard.store import SQLStore

pytestmark = pytest.mark.timeout(60)

CALLS = [{"call_id": "c1", "tool": "refund", "arguments": '{"amount":900}', "operation_id": "refund-9"}]
STATE = '{"run": "state"}'


@pytest.fixture
def store(sql_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLStore]:
    monkeypatch.delenv(PAUSE_KEY_ENV, raising=False)
    with SQLStore(sql_url) as opened:
        yield opened


def paused(store: SQLStore, *, key: str | None = None) -> None:
    if store.task("t") is None:
        Guard(budget=Budget(model_turns=3, tool_executions=3), store=store, task_id="t")
    digest = pause_digest("t", STATE, CALLS, key=key)
    outcome = {"status": "needs_human", "reason": "approval", "pause_id": "p"}
    store.save_pause("t", "p", STATE, CALLS, digest=digest, outcome=outcome)


def flip_to_approve(store: SQLStore) -> None:
    placeholder = "?" if store.backend == "sqlite" else "%s"
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE loopguard_pauses SET decisions = {placeholder} WHERE pause_id = 'p'", ('{"c1":"approve"}',)
        )


def test_a_decision_flipped_in_the_database_is_refused_at_resume(store: SQLStore) -> None:
    paused(store)
    decided = decide(store, "p", who="ana", reject_all=True, why="refund already paid")
    assert decided.decisions_digest is not None and len(decided.decisions_digest) == 64
    assert load_for_resume(store, "p").decisions == {"c1": "reject"}
    flip_to_approve(store)
    with pytest.raises(PauseTampered, match="its decisions"):
        load_for_resume(store, "p")
    assert store.pause("p").status == "decided"  # type: ignore[union-attr]  # refused before any claim


def test_who_decided_is_covered_too(store: SQLStore) -> None:
    paused(store)
    decide(store, "p", who="ana", approve_all=True)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE loopguard_pauses SET decided_by = 'lead' WHERE pause_id = 'p'")
    with pytest.raises(PauseTampered, match="who decided"):
        load_for_resume(store, "p")


def test_a_flip_between_the_check_and_the_claim_is_refused_after_the_claim(store: SQLStore) -> None:
    paused(store)
    decide(store, "p", who="ana", reject_all=True)
    record = load_for_resume(store, "p")
    chosen = decisions_for(record, None)
    flip_to_approve(store)
    with pytest.raises(PauseTampered):
        claim_for_resume(store, record, chosen, who="worker", why="", given=False)
    assert store.pause("p").status == "resumed"  # type: ignore[union-attr]  # claimed, and nothing was run


def test_decisions_brought_by_the_resumer_are_sealed_too(store: SQLStore) -> None:
    paused(store)
    record = load_for_resume(store, "p")
    claimed, transition = claim_for_resume(store, record, {"c1": "reject"}, who="worker", why="", given=True)
    assert claimed.decisions == {"c1": "reject"} and claimed.decisions_digest is not None
    assert transition.decisions == {"c1": "reject"}


def test_with_a_key_a_writer_cannot_forge_the_digests(store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PAUSE_KEY_ENV, "the-operators-key")
    paused(store)  # sealed with the key from the environment (as core's Guard.pause does)
    record = store.pause("p")
    assert record is not None and record.digest.startswith("hmac-sha256:")
    decided = decide(store, "p", who="ana", reject_all=True)
    assert decided.decisions_digest is not None and decided.decisions_digest.startswith("hmac-sha256:")
    assert load_for_resume(store, "p").decisions == {"c1": "reject"}
    # the writer flips the decision and recomputes the digest the way anyone can: without the key
    forged = decisions_digest(decided, {"c1": "approve"}, "ana", key="")
    placeholder = "?" if store.backend == "sqlite" else "%s"
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE loopguard_pauses SET decisions = {placeholder}, decisions_digest = {placeholder} "
            "WHERE pause_id = 'p'",
            ('{"c1":"approve"}', forged),
        )
    with pytest.raises(PauseTampered, match="its decisions"):
        load_for_resume(store, "p")
    # and a pause whose state was rewritten with a keyless digest is refused as well
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE loopguard_pauses SET state = {placeholder}, digest = {placeholder}, status = 'pending' "
            "WHERE pause_id = 'p'",
            ('{"run": "other"}', pause_digest("t", '{"run": "other"}', CALLS, key="")),
        )
    with pytest.raises(PauseTampered, match="state or its pending calls"):
        decide(store, "p", who="ana", approve_all=True)


def test_a_keyed_pause_needs_the_key_to_be_checked(store: SQLStore) -> None:
    paused(store, key="k-1")
    with pytest.raises(PauseKeyMissing):
        decide(store, "p", who="ana", approve_all=True)
    decide(store, "p", who="ana", approve_all=True, key="k-1")
    assert load_for_resume(store, "p", key="k-1").decisions == {"c1": "approve"}
    with pytest.raises(PauseKeyMissing, match=PAUSE_KEY_ENV):
        load_for_resume(store, "p")
    with pytest.raises(PauseTampered):
        load_for_resume(store, "p", key="another key")


def test_decisions_without_a_digest_are_accepted_only_without_a_key(store: SQLStore) -> None:
    """Decided before schema version 4 (no digest): accepted without a key; under a key a writer cannot erase the
    digest to slip decisions in."""
    paused(store)
    decide(store, "p", who="ana", approve_all=True)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE loopguard_pauses SET decisions_digest = NULL")
    assert load_for_resume(store, "p").decisions == {"c1": "approve"}
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM loopguard_pauses")
    paused(store, key="k")
    decide(store, "p", who="ana", reject_all=True, key="k")
    flip_to_approve(store)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE loopguard_pauses SET decisions_digest = NULL")
    with pytest.raises(PauseTampered, match="no digest"):
        load_for_resume(store, "p", key="k")
