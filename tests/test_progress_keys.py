"""Progress that composes (R6, R20; issue 28 item 1): each verify's revision is compared with its own progress key.

The README's ``new_documents`` (the number of documents found) and docs/sdk.md's ``order_confirmed`` (1 once the
order is confirmed), used together as the pages write them, end ``completed`` with the write ``committed``: in one
process on every store, and across a resume in another OS process. The article's one task-wide revision stays an
accepted form (``Policy(task_revision=True)``, ``Policy.prototype()``): there the same pair is invalid evidence and
the write stays ``unknown``, never sent again. Bodies are counted in the order system's journal.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard import Budget, Guard, MemoryStore, OperationState, Policy, Reason, Status, Verdict
from agents_loopguard.ops.approvals import decide
from agents_loopguard.sdk import run_guarded_sync
from agents_loopguard.store import SQLStore, Store, TraceEntry
from tests.support import forked

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))

import progress_app  # noqa: E402  (the application's agent code, shared with the resuming process)

pytestmark = pytest.mark.timeout(120)
OP = "confirm-order-42-v3"


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "sent.log"
    monkeypatch.setenv(progress_app.SENT_ENV, str(path))
    progress_app.reset()
    return path


def test_r20_the_readme_and_sdk_page_verifies_together_complete_with_the_write_committed(
    store: Store, journal: Path
) -> None:
    """R20: two searches find 2 documents (the search key's revision 2), the confirmation says revision 1: each is
    compared with its own key, the write is committed and the task completed; the body ran once."""
    outcome = run_guarded_sync(progress_app.build_agent("all"), "Confirm 42.", budget=progress_app.BUDGET, store=store)
    assert (outcome.status, outcome.reason) == (Status.COMPLETED, Reason.VALIDATED_DONE), outcome.detail
    assert len(progress_app.executions(journal)) == 1
    operation = store.lookup_operation(OP)
    assert operation is not None and operation.state is OperationState.COMMITTED
    task_id = outcome.record().task_id
    assert store.progress_keys(task_id) == {"search_docs": 2, "confirm_order": 1}
    task = store.task(task_id)
    assert task is not None and task.revision == 3  # the task's revision moved by each key's advance


def test_r20_under_the_articles_task_wide_revision_the_same_pair_is_invalid_and_never_resent(
    store: Store, journal: Path
) -> None:
    """R6, R10: ``Policy(task_revision=True)`` is the article's form: every verify reports the task's number, so
    the confirmation's 1 goes back from the searches' 2: invalid evidence, the write stays ``unknown`` (its
    ``committed`` is not trusted when the rest of its evidence is wrong) and nothing sends it again."""
    agent = progress_app.build_agent("all")
    policy = Policy(task_revision=True)
    outcome = run_guarded_sync(agent, "Confirm 42.", budget=progress_app.BUDGET, store=store, policy=policy)
    assert (outcome.status, outcome.reason) == (Status.NEEDS_RECONCILIATION, Reason.INVALID_EVIDENCE)
    assert "revision 1 goes back from 2" in outcome.detail
    operation = store.lookup_operation(OP)
    assert operation is not None and operation.state is OperationState.UNKNOWN
    agent = progress_app.build_agent("all")  # another task asks for the same confirmation
    again = run_guarded_sync(agent, "Confirm 42.", budget=progress_app.BUDGET, store=store, policy=policy)
    assert (again.status, again.reason) == (Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT)
    assert len(progress_app.executions(journal)) == 1


def test_r20_a_resume_in_another_process_compares_each_key_with_its_stored_revision(
    sql_url: str, journal: Path
) -> None:
    """R16, R20: the searches run here and the confirmation waits for approval; a new OS process resumes it with
    nothing but the store: the confirmation's revision 1 is compared with its own key (none yet), not with the
    searches' 2: completed, committed, one body."""
    with SQLStore(sql_url) as store:
        agent = progress_app.build_agent("before", approval=True)
        paused = run_guarded_sync(agent, "Confirm 42.", budget=progress_app.BUDGET, store=store, task_id="t-resume")
        assert (paused.status, paused.reason) == (Status.NEEDS_HUMAN, Reason.APPROVAL), paused.detail
        assert store.progress_keys("t-resume") == {"search_docs": 2}
        decide(store, paused.pause_id or "", who="ana", approve_all=True, why="customer asked")
    env = {**os.environ, progress_app.SENT_ENV: str(journal)}
    done = forked.run(
        [sys.executable, str(WORKERS / "progress_app.py"), "resume", sql_url, paused.pause_id or ""],
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    resumed = json.loads(done.stdout.strip().splitlines()[-1])
    assert resumed["pid"] != os.getpid()
    record = resumed["outcome"]
    assert (record["status"], record["reason"]) == ("completed", "validated_done"), record
    [sent] = progress_app.executions(journal)
    assert sent.endswith(f"pid={resumed['pid']}")
    with SQLStore(sql_url) as store:
        operation = store.lookup_operation(OP)
        assert operation is not None and operation.state is OperationState.COMMITTED
        assert store.progress_keys("t-resume") == {"search_docs": 2, "confirm_order": 1}


# --- the rule, on the engine ---------------------------------------------------------------------------------------


def _settle(guard: Guard, tool: str, revision: int, *, key: str | None = None, q: Any = 1) -> Verdict | None:
    proposal: dict[str, Any] = {"tool": tool, "kind": "read", "args": {"q": q}}
    if key is not None:
        proposal["progress_key"] = key
    ticket = guard.authorize(proposal)
    assert not isinstance(ticket, Verdict), ticket
    return guard.settle(ticket, {"status": "ok"}, evidence={"revision": revision, "done": False, "effect": "none"})


def test_r6_a_key_never_goes_back_and_its_explanation_names_it(store: Store) -> None:
    """R6: within one key the revision still never goes back (invalid evidence naming the key); another key's
    lower number is no concern of it."""
    guard = Guard(budget=Budget(9, 9), store=store, task_id="t-back")
    assert _settle(guard, "search", 3) is None
    assert _settle(guard, "orders", 1) is None  # its own key: 0 -> 1
    verdict = _settle(guard, "search", 2, q=2)
    assert verdict is not None and verdict.reason is Reason.INVALID_EVIDENCE
    assert verdict.detail == "revision 2 goes back from 3, the last revision of progress key 'search'"


def test_r7_tools_that_declare_one_key_share_its_revision(store: Store) -> None:
    """R7: two tools counting the same thing declare one key: a number one of them reached is no progress for the
    other, so the stall rule counts it (3 results without a new revision: no_progress)."""
    guard = Guard(budget=Budget(9, 9), store=store, task_id="t-shared")
    assert _settle(guard, "search", 2, key="documents") is None
    assert _settle(guard, "fetch", 2, key="documents") is None
    assert _settle(guard, "search", 2, key="documents", q=2) is None
    verdict = _settle(guard, "fetch", 2, key="documents", q=2)
    assert verdict is not None and verdict.reason is Reason.NO_PROGRESS
    assert store.progress_keys("t-shared") == {"documents": 2}


def test_r16_a_new_guard_reads_each_keys_revision_from_the_store(store: Store) -> None:
    """R16: a guard made later (another run, another worker) compares with the keys' stored revisions: the same
    number again is no progress, a lower one goes back."""
    first = Guard(budget=Budget(20, 20), store=store, task_id="t-later")
    assert _settle(first, "search", 4) is None
    assert _settle(first, "orders", 1) is None
    later = Guard(budget=Budget(20, 20), store=store, task_id="t-later")
    assert later.progress_revision(later.authorize({"tool": "search", "kind": "read", "args": {"q": 9}}).call) == 4
    verdict = _settle(later, "orders", 0, q=2)
    assert verdict is not None and "goes back from 1" in verdict.detail


def test_the_prototypes_policy_keeps_one_task_wide_revision() -> None:
    """SPEC's reference semantics: under ``Policy.prototype()`` a lower number from another tool goes back."""
    guard = Guard(budget=Budget(9, 9), store=MemoryStore(), policy=Policy.prototype())
    assert _settle(guard, "search", 2) is None
    verdict = _settle(guard, "orders", 1)
    assert verdict is not None and verdict.detail == "revision 1 goes back from 2"


def test_the_store_keeps_each_keys_last_revision(store: Store) -> None:
    """Any key name (SQL wildcards and colons included), its highest revision; a page's own seen keys stay apart."""
    store.ensure_task("t-keys", Budget(9, 9))
    for key, revision in (("a_b%:c", 2), ("a_b%:c", 5), ("x", 1), ("a_b%:c", 4)):
        store.record_execution("t-keys", TraceEntry(kind="tool", tool="t"), revision=revision, key=(key, revision))
    progress = store.record_execution("t-keys", TraceEntry(kind="tool"), revision=5, seen=["cursor:revision:y:9"])
    assert progress.seen_before == (False,)
    assert store.progress_keys("t-keys") == {"a_b%:c": 5, "x": 1}
    assert store.progress_keys("t-none") == {}


def test_every_way_of_declaring_a_tool_takes_its_progress_key() -> None:
    """The one declaration (``declare_tool``) behind every adapter's: the SDK's ``guarded_tool``, raw
    ``GuardedTool``, ADK's ``guarded_tool`` and ``loopguard mcp``'s ``[tools.X]`` carry ``progress_key``; an empty
    or non-string key is refused with the tool's name."""
    from agents_loopguard.adk import guarded_tool as adk_tool
    from agents_loopguard.adk.tools import tool_spec as adk_spec
    from agents_loopguard.function_calling import GuardedTool
    from agents_loopguard.mcp.config import ConfigError, parse_config
    from agents_loopguard.run import declare_tool
    from agents_loopguard.sdk import guarded_tool, tool_spec

    def search(query: str) -> str:
        """Search."""
        return query

    assert tool_spec(guarded_tool(search, progress_key="documents")).progress_key == "documents"  # type: ignore[union-attr]
    assert GuardedTool("search", search, parameters={}, progress_key="documents").spec.progress_key == "documents"
    assert adk_spec(adk_tool(search, progress_key="documents")).progress_key == "documents"
    config = {"upstream": {"command": ["x"]}, "tools": {"search": {"kind": "read", "progress_key": "documents"}}}
    assert parse_config(config).tools["search"].progress_key == "documents"
    with pytest.raises(ValueError, match="tool 'search': progress_key must be a non-empty string"):
        declare_tool("search", progress_key="")
    with pytest.raises(ConfigError, match=r"\[tools.search\]: .*progress_key"):
        parse_config({"upstream": {"command": ["x"]}, "tools": {"search": {"progress_key": 7}}})
