"""The demo: an Agents SDK agent caught in a loop, and a payment whose response is lost, on the embedded store.

Run ``loopguard demo`` (or ``python -m agents_loopguard.demo``). No API key is needed: the model is the SDK's
``ScriptedModel``, scripted the way a model caught in a loop behaves. With ``OPENAI_API_KEY`` set, ``--model
gpt-4o-mini`` runs the same agents on a real model (the guard and its limits are the same; what the model does is
its own).

The records go to the store named by ``--db`` / ``LOOPGUARD_DATABASE_URL`` (default: a SQLite file under
``./.loopguard/``), so ``loopguard show TASK`` can show them afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .values.budget import Budget
from .values.outcome import Outcome

__all__ = ["main", "run_demo"]

# The application's own state: what the search has established, and what the payment receiver has accepted.
_found: dict[str, str] = {}
_accepted: list[dict[str, Any]] = []
_searches: list[str] = []

_CATALOGUE = {
    "late delivery refund": ["doc-14 Refunds within 30 days of delivery", "doc-31 Late deliveries: full refund"],
    "refund late delivery": ["doc-31 Late deliveries: full refund"],
    "late delivery compensation": ["doc-14 Refunds within 30 days of delivery"],
}


def _tools() -> tuple[Any, Any]:
    from .sdk import guarded_tool

    def new_documents(args: dict[str, Any], hits: list[str]) -> dict[str, Any]:
        """Trusted check: the revision is the number of distinct documents the application holds."""
        for hit in hits:
            _found.setdefault(hit.split()[0], hit)
        return {"revision": len(_found), "done": False, "effect": "none"}

    @guarded_tool(verify=new_documents)
    def search_policies(query: str) -> list[str]:
        """Search the company's policy documents."""
        _searches.append(query)
        return _CATALOGUE.get(query.lower(), [])

    def payment_receipt(args: dict[str, Any], output: Any) -> dict[str, Any]:
        """Trusted check against the receiver: committed only if it holds this exact payment."""
        held = any(p["invoice"] == args["invoice"] and p["amount"] == args["amount"] for p in _accepted)
        return {"revision": 1, "done": held, "effect": "committed" if held else "not_committed"}

    @guarded_tool(
        kind="write",
        operation_id=lambda a: f"invoice-{a['invoice']}-pay-{a['amount']}",
        verify=payment_receipt,
    )
    def pay_invoice(invoice: int, amount: int) -> str:
        """Pay an invoice."""
        _accepted.append({"invoice": invoice, "amount": amount})  # the receiver accepts the payment...
        raise TimeoutError("read timed out")  # ...and its answer is lost on the way back

    return search_policies, pay_invoice


def _scripted(turns: list[list[Any]]) -> Any:
    from agents.testing import ScriptedModel

    return ScriptedModel(turns)


def _search_model() -> Any:
    from agents.testing import assistant_message, function_call

    queries = [
        "late delivery refund",
        "refund late delivery",
        "late delivery refund",
        "late delivery compensation",
        "late delivery refund",
        "late delivery refund",
        "refund late delivery",
        "late delivery refund",
    ]
    turns = [[function_call("search_policies", {"query": q}, call_id=f"call_s{i}")] for i, q in enumerate(queries)]
    return _scripted([*turns, [assistant_message("Late deliveries get a full refund.")]])


def _payment_model(round_: int, invoice: int) -> Any:
    from agents.testing import assistant_message, function_call

    pay = {"invoice": invoice, "amount": 120}
    return _scripted(
        [
            [function_call("pay_invoice", pay, call_id=f"call_p{round_}a")],
            [function_call("pay_invoice", pay, call_id=f"call_p{round_}b")],  # "it timed out, let me try again"
            [assistant_message(f"Invoice {invoice} is paid.")],
        ]
    )


def _count(n: int, word: str) -> str:
    """``1 model turn``, ``2 model turns``."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def _relative(path: Path) -> str:
    """``path`` as short as it can be typed from here: relative when under the working directory."""
    if path.is_absolute():
        with contextlib.suppress(ValueError):
            path = path.relative_to(Path.cwd())
    text = str(path)
    return text if os.sep in text else f".{os.sep}{text}"


def loopguard_command() -> str:
    """The ``loopguard`` command as the user can run it here: ``loopguard`` when that is the one on ``PATH``, else
    the path of this installation's script (relative when under the working directory), else ``python -m
    agents_loopguard`` with this interpreter.

    >>> loopguard_command().endswith(("loopguard", "-m agents_loopguard"))
    True
    """
    scripts = [Path(sys.executable).parent / "loopguard"]
    if sys.argv and Path(sys.argv[0]).name == "loopguard":
        scripts.insert(0, Path(sys.argv[0]))  # as it was typed
    on_path = shutil.which("loopguard")
    for script in scripts:
        if script.is_file():
            if on_path and Path(on_path).resolve() == script.resolve():
                return "loopguard"
            return shlex.quote(_relative(script))
    return f"{shlex.quote(_relative(Path(sys.executable)))} -m agents_loopguard"


def _show(out: Callable[[str], None], title: str, outcome: Outcome) -> None:
    out(f"\n== {title}")
    out(f"   outcome: {outcome.status} / {outcome.reason}")
    if outcome.detail:
        out(f"   why:     {outcome.detail}")
    out(f"   used:    {_count(outcome.used.models, 'model turn')}, {_count(outcome.used.tools, 'tool execution')}")


def run_demo(
    *, db: str | None = None, model: str | None = None, suffix: str | None = None, out: Callable[[str], None] = print
) -> list[Outcome]:
    """Run both demo tasks on the store at ``db``, telling the story line by line to ``out``; return their outcomes.

    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> outcomes = run_demo(db=f"sqlite:///{folder}/demo.db", suffix="doc")  # doctest: +ELLIPSIS
    <BLANKLINE>
    == ...
    >>> [f"{o.status}/{o.reason}" for o in outcomes]  # doctest: +NORMALIZE_WHITESPACE
    ['stopped/no_progress', 'needs_reconciliation/executor_exception',
     'needs_reconciliation/unknown_commit']
    """
    from agents import Agent, set_tracing_disabled

    from .sdk import run_guarded_sync
    from .store.sql import SQLStore

    if model is None:
        set_tracing_disabled(True)  # scripted: nothing to export
    _found.clear()
    _accepted.clear()
    _searches.clear()
    store = SQLStore(db)
    run_id = suffix or uuid.uuid4().hex[:6]
    invoice = 1000 + int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % 9000  # a fresh invoice per demo run
    search_policies, pay_invoice = _tools()
    outcomes: list[Outcome] = []

    def agent(name: str, tools: list[Any], scripted: Any) -> Any:
        return Agent(
            name=name,
            instructions="Use the tools to answer; pay invoices when asked.",
            model=model or scripted,
            tools=tools,
        )

    search_task = f"demo-search-{run_id}"
    searched = run_guarded_sync(
        agent("support", [search_policies], _search_model()),
        "A customer's parcel arrived 10 days late. What refund do we owe?",
        budget=Budget(model_turns=12, tool_executions=8),
        store=store,
        task_id=search_task,
    )
    _show(out, "an agent searching in circles", searched)
    out(f"   searches that ran: {len(_searches)} of 8 proposed; documents verified: {sorted(_found)}")
    outcomes.append(searched)

    pay_task = f"demo-payment-{run_id}"
    paid = run_guarded_sync(
        agent("billing", [pay_invoice], _payment_model(1, invoice)),
        f"Pay invoice {invoice} (120 EUR).",
        budget=Budget(model_turns=6, tool_executions=4),
        store=store,
        task_id=pay_task,
    )
    _show(out, "a payment whose response was lost", paid)
    outcomes.append(paid)

    retry_task = f"demo-payment-retry-{run_id}"
    retried = run_guarded_sync(
        agent("billing", [pay_invoice], _payment_model(2, invoice)),
        f"The payment of invoice {invoice} timed out. Pay it again.",
        budget=Budget(model_turns=6, tool_executions=4),
        store=store,
        task_id=retry_task,
    )
    _show(out, "a new run asked to pay the same invoice again", retried)
    out(f"   payments the receiver holds: {len(_accepted)} (the guard never re-sent the unknown write)")
    outcomes.append(retried)

    stored = store.task(pay_task)
    out("\n== the recovery record stored for the payment task")
    out("   " + json.dumps(stored.outcome if stored else None, indent=2).replace("\n", "\n   "))
    where = f"--db {shlex.quote(db)} " if db and db != os.environ.get("LOOPGUARD_DATABASE_URL") else ""
    command = f"{loopguard_command()} {where}"
    out("\n== look at it with the operator command")
    out(f"   {command}tasks")
    out(f"   {command}show {search_task}")
    out(f"   {command}show {pay_task}")
    out(f"   {command}reconcile {paid.operation_id} committed --who you --why 'receiver shows it paid'")
    store.close()
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agents_loopguard.demo [--db URL] [--model NAME]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    db = model = None
    while args:
        flag = args.pop(0)
        if flag in ("--db", "--model") and args:
            value = args.pop(0)
            db, model = (value, model) if flag == "--db" else (db, value)
        else:
            print(
                f"usage: python -m agents_loopguard.demo [--db URL] [--model NAME]  (unknown: {flag})", file=sys.stderr
            )
            return 2
    if model and not os.environ.get("OPENAI_API_KEY"):
        print("--model needs OPENAI_API_KEY; without it the demo runs its scripted model", file=sys.stderr)
        return 2
    run_demo(db=db or os.environ.get("LOOPGUARD_DATABASE_URL"), model=model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
