"""R13 through LangChain's own idiom: ``HumanInTheLoopMiddleware`` interrupts with a checkpointer, and
``Command(resume=...)`` continues the *same* task once, with its counters, from another OS process too (LangGraph's
SQLite checkpointer with the guard's SQLite store, its PostgreSQL checkpointer with the guard's PostgreSQL store).
Issue 19's measurements: LangChain's run
count restarted after every resume, and resuming the interrupted checkpoint by its ``checkpoint_id`` ran the
approved refund a second time and rewound the thread count; a human rejecting every proposal never ended the run."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from agents_loopguard import Budget, MemoryStore, Reason, RecoveryRecord, Status
from agents_loopguard.langchain import LoopGuardMiddleware
from agents_loopguard.langchain.testing import ScriptedChatModel, calls
from agents_loopguard.ops.approvals import ResumeError
from agents_loopguard.run import declare_tool
from agents_loopguard.store import SQLStore
from tests.conftest import libpq_url, with_search_path
from tests.support import forked
from tests.support.langchain_shop import BUDGET, refund_agent
from tests.support.scripted_openai import ScriptedOpenAIServer, final_text, tool_call
from tests.support.stores import sql_store

pytestmark = pytest.mark.timeout(120)
store = pytest.fixture(sql_store, name="store")
ROOT = Path(__file__).resolve().parents[1]
APPROVE = [{"type": "approve"}]
REJECT = [{"type": "reject", "message": "not this one"}]


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def resume_in_another_process(tmp_path: Path, **cfg: Any) -> dict[str, Any]:
    result = tmp_path / "resumed.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    config = json.dumps({**cfg, "result": str(result)})
    done = forked.run(
        [sys.executable, "-m", "tests.support.langchain_shop", "resume", config],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded: dict[str, Any] = json.loads(result.read_text())
    return loaded


@pytest.mark.slow
def test_an_approval_resumes_once_from_another_process_with_the_counters_continuing(
    tmp_path: Path, store: SQLStore, sql_url: str
) -> None:
    """The interrupt is a stored pause (``needs_human/approval`` with the budget); a second OS process resumes it
    through ``Command(resume=...)``: the refund runs once, the counters go on from the pause. Resuming the
    interrupted checkpoint again by its ``checkpoint_id`` runs nothing twice and never rewinds the budget."""
    ledger = tmp_path / "ledger.txt"
    with checkpoints_beside(sql_url, tmp_path) as checkpoints:
        approval_resumed_elsewhere(tmp_path, store, sql_url, ledger, checkpoints)


@contextlib.contextmanager
def checkpoints_beside(sql_url: str, tmp_path: Path) -> Iterator[str]:
    """LangGraph's checkpointer on the guard store's backend: a SQLite file, or a PostgreSQL schema of its own (a
    loopguard store refuses a schema that holds other tables)."""
    if not sql_url.startswith("postgresql"):
        yield str(tmp_path / "checkpoints.sqlite")
        return
    import psycopg

    schema = f"lg_cp_{uuid.uuid4().hex[:12]}"
    server = libpq_url(sql_url.split("?", 1)[0])
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield libpq_url(with_search_path(sql_url.split("?", 1)[0], schema))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def approval_resumed_elsewhere(tmp_path: Path, store: SQLStore, sql_url: str, ledger: Path, checkpoints: str) -> None:
    thread = {"thread_id": "refund-42"}
    with ScriptedOpenAIServer([tool_call("refund", {"order": 42}), final_text("Refunded.")]) as server:
        agent, guard = refund_agent(server.base_url, store, checkpoints, ledger)
        paused = agent.invoke({"messages": [{"role": "user", "content": "refund order 42"}]}, {"configurable": thread})
        assert "__interrupt__" in paused
        outcome = guard.outcome(paused)
        assert outcome is not None and (outcome.status, outcome.reason) == (Status.NEEDS_HUMAN, Reason.APPROVAL)
        pause = store.pause(outcome.pause_id or "")
        assert pause is not None and pause.status == "pending" and pause.budget == BUDGET
        assert [c["operation_id"] for c in pause.pending_calls] == ["refund-42"]
        interrupted = agent.get_state({"configurable": thread}).config["configurable"]
        assert ledger_lines(ledger) == [] and outcome.used.models == 1

        resumed = resume_in_another_process(
            tmp_path,
            base_url=server.base_url,
            store=sql_url,
            checkpoints=checkpoints,
            ledger=str(ledger),
            who="ana",
            decisions=APPROVE,
            configurable=thread,
        )
        record = RecoveryRecord.from_json(resumed).to_outcome()
        assert (record.status, record.reason) == (Status.COMPLETED, Reason.VALIDATED_DONE)
        assert (record.used.models, record.used.tools) == (2, 1)  # continued from the pause: 1 + 1 model turns
        assert ledger_lines(ledger) == ["refund-42"] and len(server.requests) == 2
        transition = store.transitions("refund-42")[0]
        assert (transition.who, transition.decisions) == ("ana", {pause.pending_calls[0]["call_id"]: "approve"})

        again = agent.invoke(Command(resume={"decisions": APPROVE}), {"configurable": interrupted})
        after = guard.outcome(again)
        assert after is not None and after.status is Status.COMPLETED
        assert (after.used.models, after.used.tools) == (2, 1)  # never rewound, nothing ran twice
        assert ledger_lines(ledger) == ["refund-42"] and len(server.requests) == 2
        assert store.pause(pause.pause_id).status == "resumed"


def test_a_human_who_keeps_rejecting_ends_the_run(tmp_path: Path) -> None:
    """Issue 19: a human rejecting every proposal under ``run_limit`` never ended the run. Each rejection is a
    resume of the same task; the model turns it keeps spending end it, and nothing was ever executed."""
    ledger, store = tmp_path / "ledger.txt", SQLStore(f"sqlite:///{tmp_path / 'guard.db'}")
    thread = {"configurable": {"thread_id": "rejected"}}
    script = [tool_call("refund", {"order": n}) for n in range(20)]
    with ScriptedOpenAIServer(script) as server:
        agent, guard = refund_agent(server.base_url, store, str(tmp_path / "cp.sqlite"), ledger)
        result = agent.invoke({"messages": [{"role": "user", "content": "refund something"}]}, thread)
        rounds = 0
        while "__interrupt__" in result and rounds < 20:
            rounds += 1
            result = agent.invoke(Command(resume={"decisions": REJECT}), thread)
        outcome = guard.outcome(result)
        assert outcome is not None and outcome.status is Status.STOPPED and outcome.reason is Reason.MODEL_BUDGET
        assert rounds == BUDGET.model_turns and len(server.requests) == outcome.used.models == BUDGET.model_turns
        assert ledger_lines(ledger) == [] and outcome.used.tools == 0
    store.close()


def test_a_rejection_is_recorded_and_the_model_reads_it() -> None:
    """The decisions LangChain applied are the ones recorded with the resume (a reject stays a reject)."""
    from langgraph.checkpoint.memory import InMemorySaver

    store = MemoryStore()
    spec = declare_tool("refund", kind="write", operation_id=lambda a: f"refund-{a['order']}", verify=lambda a, o: {})
    guard = LoopGuardMiddleware(budget=Budget(5, 3), store=store, tools={"refund": spec})
    model = ScriptedChatModel([calls(("refund", {"order": 1})), "I will not refund it."])
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        raise AssertionError("a rejected refund never runs")

    middleware = [guard, guard.human_in_the_loop({"refund": True})]
    agent = create_agent(model, tools=[refund], middleware=middleware, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t-reject"}}
    agent.invoke({"messages": [{"role": "user", "content": "refund 1"}]}, thread)
    result = agent.invoke(Command(resume={"decisions": REJECT}), thread)
    outcome = guard.outcome(result)
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.PARTIAL, Reason.UNVERIFIED_FINAL)
    assert store.transitions("t-reject")[0].decisions == {"call_0": "reject"}
    assert "not this one" in str(model.requests[1]["messages"][-1].content)


def test_the_guarded_review_supports_the_batched_mode_only() -> None:
    guard = LoopGuardMiddleware(budget=Budget(5, 3), store=MemoryStore())
    with pytest.raises(ValueError, match="batched"):
        guard.human_in_the_loop({"refund": True}, interrupt_mode="per_call")
    assert ResumeError is not None


def _review_agent(store: MemoryStore, review: Any, refunds: list[int]) -> tuple[Any, LoopGuardMiddleware]:
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    spec = declare_tool("refund", kind="write", operation_id=lambda a: f"refund-{a['order']}", verify=lambda a, o: {})
    guard = LoopGuardMiddleware(budget=Budget(5, 3), store=store, tools={"refund": spec})
    model = ScriptedChatModel([calls(("refund", {"order": 1})), "Refunded."])

    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        refunds.append(order)
        return "refunded"

    middleware = [guard, review(guard)]
    return create_agent(model, tools=[refund], middleware=middleware, checkpointer=InMemorySaver()), guard


def test_an_interrupted_result_tells_its_pause_in_any_process() -> None:
    """Issue 26 item 5: ``outcome_of`` read ``None`` from an interrupted result. The pause's record rides in the
    interrupt's value: ``needs_human/approval`` with the stored pause's id, from the result alone."""
    from agents_loopguard.langchain import outcome_of

    store = MemoryStore()
    agent, _ = _review_agent(store, lambda guard: guard.human_in_the_loop({"refund": True}), [])
    paused = agent.invoke({"messages": [{"role": "user", "content": "refund 1"}]}, {"configurable": {"thread_id": "p"}})
    outcome = outcome_of(paused)
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.NEEDS_HUMAN, Reason.APPROVAL)
    pause = store.pause(outcome.pause_id or "")
    assert pause is not None and pause.status == "pending" and outcome.task_id == "p"


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_langchains_own_review_beside_the_guard_is_refused_before_a_reviewed_body_runs(mode: str) -> None:
    """Issue 26 item 5: LangChain's ``HumanInTheLoopMiddleware`` beside the guard paused outside it (nothing
    stored, its checkpoint resumable twice). Its first reviewed call is refused, nothing of it runs, and the run
    ends ``stopped/fatal`` naming ``guard.human_in_the_loop``."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    refunds: list[int] = []
    review = HumanInTheLoopMiddleware({"refund": True}, interrupt_mode=mode)  # type: ignore[arg-type]
    agent, guard = _review_agent(MemoryStore(), lambda _: review, refunds)
    thread = {"configurable": {"thread_id": f"plain-{mode}"}}
    result = agent.invoke({"messages": [{"role": "user", "content": "refund 1"}]}, thread)
    if "__interrupt__" in result:
        result = agent.invoke(Command(resume={"decisions": APPROVE}), thread)
    outcome = guard.outcome(result)
    assert outcome is not None and (outcome.status, outcome.reason) == (Status.STOPPED, Reason.FATAL)
    assert "guard.human_in_the_loop" in outcome.detail and refunds == []
    assert result["messages"][-1].content.startswith("Stopped by loopguard (stopped/fatal)")
