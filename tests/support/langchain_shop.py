"""The refund agent of the LangChain approval tests, built the same way in the test process and in the worker that
resumes it (``python -m tests.support.langchain_shop resume CONFIG``): ``create_agent`` with ``LoopGuardMiddleware``
and the guarded ``HumanInTheLoopMiddleware``, ``ChatOpenAI`` over HTTP, LangGraph's SQLite checkpointer file (or its
PostgreSQL checkpointer) and the guard's SQL store. Each refund body appends a line to a ledger file, so executions
are counted across processes."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agents_loopguard import Budget
from agents_loopguard.langchain import LoopGuardMiddleware
from agents_loopguard.run import declare_tool
from agents_loopguard.store import SQLStore

__all__ = ["BUDGET", "checkpointer", "refund_agent"]

BUDGET = Budget(model_turns=6, tool_executions=4)


def refund_agent(base_url: str, store: SQLStore, checkpoints: str, ledger: Path, **options: Any) -> tuple[Any, Any]:
    """The agent and its guard middleware."""

    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        with ledger.open("a") as out:
            out.write(f"refund-{order}\n")
        return f"refunded {order}"

    def verify(args: dict[str, Any], output: Any) -> dict[str, Any]:
        sent = ledger.exists() and f"refund-{args['order']}" in ledger.read_text().split()
        return {"revision": 1, "done": bool(sent), "effect": "committed" if sent else "not_committed"}

    declared = {
        "refund": declare_tool("refund", kind="write", operation_id=lambda a: f"refund-{a['order']}", verify=verify)
    }
    guard = LoopGuardMiddleware(budget=BUDGET, store=store, tools=declared, **options)
    model = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="test", max_retries=0)
    saver = checkpointer(checkpoints)
    middleware = [guard, guard.human_in_the_loop({"refund": True})]
    return create_agent(model, tools=[refund], middleware=middleware, checkpointer=saver), guard


def checkpointer(where: str) -> Any:
    """LangGraph's own durable checkpointer: PostgreSQL for a ``postgresql://`` URL, else a SQLite file."""
    if where.startswith("postgresql"):
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        conn = psycopg.connect(where, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
        return saver
    return SqliteSaver(sqlite3.connect(where, check_same_thread=False))


def _resume(cfg: dict[str, Any]) -> None:
    store = SQLStore(cfg["store"])
    agent, guard = refund_agent(cfg["base_url"], store, cfg["checkpoints"], Path(cfg["ledger"]), who=cfg["who"])
    result = agent.invoke(Command(resume={"decisions": cfg["decisions"]}), {"configurable": cfg["configurable"]})
    outcome = guard.outcome(result)
    Path(cfg["result"]).write_text(json.dumps(outcome.record().to_dict() if outcome is not None else None))
    store.close()


if __name__ == "__main__":
    if sys.argv[1] == "resume":
        _resume(json.loads(sys.argv[2]))
