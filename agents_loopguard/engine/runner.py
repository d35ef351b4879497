"""The article's synchronous runner, ``run(proposals) -> Outcome``, on the engine (:class:`~.core.Guard`).

For the same budget, clock, proposals, executor results and verifier evidence it reaches the prototype's status,
reason, revision, value, counters and ledger states (the test suite checks it against a transliteration of the
prototype).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..store.base import Store
from ..values.budget import TOKEN_LIMITS, Budget, Policy
from ..values.calls import Verdict
from ..values.outcome import Outcome, Reason, Status
from .core import Guard

__all__ = ["create_runner"]


def create_runner(
    *,
    budget: Budget,
    store: Store | None = None,
    now: Callable[[], float] = time.time,
    execute: Callable[[Any], Any],
    verify: Callable[[Any, Any], Any],
    initial_revision: int = 0,
    policy: Policy | None = None,
    task_id: str | None = None,
    secrets: Iterable[str] = (),
    ledger: Store | None = None,
) -> Callable[[Iterable[Any]], Outcome]:
    """The article's synchronous runner: ``run(proposals) -> Outcome``, built on :class:`Guard`.

    Each proposal reserves one model turn, then goes through the guard; ``execute(proposal)`` runs only when the
    guard allows it, and ``verify(proposal, result)`` decides progress: one verify for every call, so it reports the
    task's one revision (``Policy.task_revision``; a proposal's own ``progress_key`` still counts apart). A finished
    runner returns the same outcome.
    ``store`` is where the task lives (default: a new :class:`~agents_loopguard.store.memory.MemoryStore`);
    ``ledger`` is its deprecated old name (a :class:`DeprecationWarning`; passing both is a ``TypeError``).

    >>> from agents_loopguard import Budget
    >>> run = create_runner(
    ...     budget=Budget(model_turns=6, tool_executions=4, deadline=100), now=lambda: 0,
    ...     execute=lambda call: {"status": "ok", "receipt": "r-1"},
    ...     verify=lambda call, result: {"revision": 1, "done": True, "effect": "committed"})
    >>> save = {"tool": "save", "kind": "write", "operation_id": "order-42-confirm", "args": {"amount": 5}}
    >>> outcome = run([save, save])
    >>> outcome.status, outcome.reason, outcome.used.tools
    (<Status.COMPLETED: 'completed'>, <Reason.VALIDATED_DONE: 'validated_done'>, 1)
    >>> run([save]) is outcome
    True
    """
    if ledger is not None:
        import warnings  # only this deprecated alias warns; the engine reports through logging

        if store is not None and store is not ledger:
            raise TypeError("create_runner: pass the store once, as store= (ledger= is its deprecated alias)")
        warnings.warn("create_runner(ledger=...) is deprecated: pass store=...", DeprecationWarning, stacklevel=2)
        store = ledger
    unmetered = [name for name in ("cost", *TOKEN_LIMITS) if getattr(budget, name) is not None]
    if unmetered:  # the runner sends no model request: nothing could reserve or charge these limits
        raise ValueError(
            f"create_runner cannot enforce the budget's {', '.join(unmetered)} limit: it makes no model request to "
            "meter; use run_guarded or the function-calling loop, which reserve and settle cost and tokens"
        )
    guard = Guard(
        budget=budget,
        store=store,
        task_id=task_id,
        policy=dataclasses.replace(policy or Policy(), task_revision=True),  # one verify: the task's one revision
        clock=now,
        initial_revision=initial_revision,
        secrets=secrets,
    )

    def run(proposals: Iterable[Any]) -> Outcome:
        if guard.outcome is not None:
            return guard.outcome
        for proposal in proposals:
            at = guard._now()
            refused = guard.begin_turn(now=at)
            if refused is not None:
                return guard.end(refused)
            ticket = guard.authorize(proposal, now=at)
            if isinstance(ticket, Verdict):
                return guard.end(ticket)
            if ticket.replay:
                result = ticket.result
            else:
                try:
                    result = execute(proposal)
                except Exception as exc:
                    return guard.end(guard.fail(ticket, exc))
            verdict = guard.settle(ticket, result, verify)
            if verdict is not None:
                return guard.end(verdict)
        return guard.end(Verdict(Status.PARTIAL, Reason.PLAN_EXHAUSTED, "no proposal left and the task is not done"))

    run.guard = guard  # type: ignore[attr-defined]
    return run
