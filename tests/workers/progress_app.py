"""The application of the composing-progress tests (issue 28 item 1): the README's ``search_docs`` verified by its
``new_documents`` and docs/sdk.md's ``confirm_order`` verified by its ``order_confirmed``, both functions taken
verbatim from the pages (never a copy that could drift), in one agent.

Each execution of ``confirm_order``'s body appends a line to the file named by ``$PROGRESS_APP_SENT`` (the order
system's journal), so a test counts real executions across processes. Run as a script, it resumes a decided pause
in this new process and prints the outcome's record as JSON::

    python tests/workers/progress_app.py resume <store url> <pause id>
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agents_loopguard import Budget
from agents_loopguard.sdk import guarded_tool

set_tracing_disabled(True)

ROOT = Path(__file__).resolve().parents[2]
SENT_ENV = "PROGRESS_APP_SENT"
BUDGET = Budget(model_turns=8, tool_executions=6)
DOC_14, DOC_15 = "doc-14 Refunds within 30 days", "doc-15 Late refunds"
INDEX = {"refund policy": [DOC_14], "refund window": [DOC_14, DOC_15]}


def documented(page: str, name: str) -> str:
    """The source of ``def name`` as the page shows it (its code block's lines, up to the next top-level line)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = re.search(rf"^def {name}\(.*?(?=^\S)", text, flags=re.MULTILINE | re.DOTALL)
    assert found is not None, f"{page} shows no def {name}"
    return found.group(0)


PAGES: dict[str, Any] = {"found": set(), "ORDERS": {42: {"version": 3, "confirmed": False}}}
"""The globals of the pages' functions: the README's ``found`` and docs/sdk.md's ``ORDERS`` (the order system)."""
exec(documented("README.md", "new_documents"), PAGES)  # the documented code, run as documented
exec(documented("docs/sdk.md", "order_confirmed"), PAGES)
new_documents, order_confirmed, ORDERS = PAGES["new_documents"], PAGES["order_confirmed"], PAGES["ORDERS"]


def reset() -> None:
    """A new day for the application: nothing found, order 42 not confirmed."""
    PAGES["found"].clear()
    ORDERS[42]["confirmed"] = False


def executions(path: str | os.PathLike[str]) -> list[str]:
    """The confirmations the order system received (lines of ``$PROGRESS_APP_SENT``)."""
    try:
        return [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    except FileNotFoundError:
        return []


@guarded_tool(verify=new_documents)
def search_docs(query: str) -> list[str]:
    """Search the policy documents."""
    return INDEX.get(query, [])


def _confirm(order_id: int, version: int) -> str:
    """Confirm an order at a given version."""
    if journal := os.environ.get(SENT_ENV):
        with open(journal, "a", encoding="utf-8") as sent:
            sent.write(f"confirm-order-{order_id}-v{version} pid={os.getpid()}\n")
    ORDERS[order_id]["confirmed"] = True
    return f"order {order_id} confirmed"


def confirm_tool(*, approval: bool) -> Any:
    """docs/sdk.md's ``confirm_order`` (needing a human's approval when ``approval``)."""
    return guarded_tool(
        _confirm,
        kind="write",
        operation_id=lambda args: f"confirm-order-{args['order_id']}-v{args['version']}",
        verify=order_confirmed,
        name_override="confirm_order",
        needs_approval=approval,
    )


def _call(name: str, args: dict[str, Any]) -> list[Any]:
    return [function_call(name, args, call_id=f"call-{uuid.uuid4().hex[:12]}")]


BEFORE = [
    _call("search_docs", {"query": "refund policy"}),
    _call("search_docs", {"query": "refund window"}),
    _call("confirm_order", {"order_id": 42, "version": 3}),
]
AFTER = [[assistant_message("Order 42 is confirmed.")]]


def build_agent(phase: str, *, approval: bool = False) -> Agent[Any]:
    """The clerk with the model's turns ``before`` the confirmation's approval, ``after`` it, or ``all`` of them."""
    steps = {"before": BEFORE, "after": AFTER, "all": [*BEFORE, *AFTER]}[phase]
    return Agent(name="clerk", model=ScriptedModel(list(steps)), tools=[search_docs, confirm_tool(approval=approval)])


def _resume(url: str, pause_id: str) -> dict[str, Any]:
    from agents_loopguard.sdk import resume_guarded_sync
    from agents_loopguard.store import SQLStore

    with SQLStore(url) as store:
        outcome = resume_guarded_sync(build_agent("after", approval=True), pause_id, store=store, who="worker")
        return {"pid": os.getpid(), "outcome": outcome.record().to_dict()}


if __name__ == "__main__":
    command, url, pause_id = sys.argv[1:4]
    assert command == "resume", command
    print(json.dumps(_resume(url, pause_id)))
