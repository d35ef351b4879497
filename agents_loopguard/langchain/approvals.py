"""Approvals through LangChain's own idiom: ``HumanInTheLoopMiddleware`` interrupts, ``Command(resume=...)``
continues, and the guard keeps the task.

:class:`GuardedHumanInTheLoop` is LangChain's middleware (batched mode) with two additions, both around its own
``after_model``, and both translation onto :mod:`agents_loopguard.ops.approvals`:

* when it interrupts, the interrupt is stored first as a pause of the guard's task, with the task's budget and
  counters (``needs_human/approval``, ``Outcome.pause_id``; the pause's state names the LangGraph thread and
  checkpoint);
* when LangGraph re-runs the interrupted node with the human's answer, the pause is claimed once (the decisions
  recorded: ``approve`` and ``edit`` as approve, ``reject`` and ``respond`` as reject) and the run continues under
  the *same* task, its counters going on, in any process that has the agent and both stores. Resuming an old
  checkpoint again finds the pause resumed: nothing is claimed twice, the counters are the task's (never the
  checkpoint's), and a committed write replays its stored result instead of running again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.config import get_config
from langgraph.errors import GraphInterrupt
from langgraph.runtime import Runtime

from ..engine.core import Guard
from ..ops.approvals import APPROVE, REJECT, claim_for_resume, decisions_for, find_pause_for
from ..run import Ending, conclude_now
from ..store.base import PauseAlreadyResumed
from ..values.canonical import CanonicalError, canonical_json, redact
from ..values.outcome import Reason
from .options import LangChainOptions
from .scope import STATE_KEY, Scope

__all__ = ["GuardedHumanInTheLoop", "Guarding", "pause_record"]


class Guarding(Protocol):
    """What the review needs of the guard middleware (:class:`~.LoopGuardMiddleware`)."""

    options: LangChainOptions
    review: Any

    def scope(self, state: Mapping[str, Any] | None) -> Scope: ...

    def start(self, task_id: str, options: LangChainOptions | None = None) -> Scope: ...

    def release(self, scope: Scope) -> None: ...


def _interrupts(result: Any) -> list[Any]:
    """The interrupts of an agent's result: ``result["__interrupt__"]``, or a ``version="v2"`` result's."""
    found = result.get("__interrupt__") if isinstance(result, Mapping) else getattr(result, "interrupts", None)
    return list(found or ())


def pause_record(result: Any) -> dict[str, Any] | None:
    """The recovery record of the pause an interrupted result carries (``needs_human/approval``), if the guarded
    review made the interrupt.

    >>> pause_record({"messages": []}) is None
    True
    """
    for interrupt in _interrupts(result):
        value = getattr(interrupt, "value", None)
        entry = value.get(STATE_KEY) if isinstance(value, Mapping) else None
        record = entry.get("outcome") if isinstance(entry, Mapping) else None
        if isinstance(record, Mapping):
            return dict(record)
    return None


def _arguments(args: Any, secrets: Any) -> str:
    try:
        return canonical_json(redact(args, secrets=secrets)).decode()
    except CanonicalError:
        return str(redact(str(args), secrets=secrets))


class GuardedHumanInTheLoop(HumanInTheLoopMiddleware):
    """``HumanInTheLoopMiddleware`` whose interrupts are pauses of a :class:`~.LoopGuardMiddleware`'s task; build
    it with :meth:`LoopGuardMiddleware.human_in_the_loop` and list it with the guard."""

    def __init__(self, guard: Guarding, **options: Any) -> None:
        if options.get("interrupt_mode", "batched") != "batched":
            raise ValueError("the guarded human-in-the-loop middleware supports interrupt_mode='batched' only")
        super().__init__(**options)
        self.guard = guard
        guard.review = self  # the guard knows its review: LangChain's own beside it is refused

    @property
    def name(self) -> str:
        return "GuardedHumanInTheLoop"

    def _gated(self, state: Mapping[str, Any], runtime: Runtime[Any]) -> list[dict[str, Any]]:
        messages = state.get("messages") or []
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        if last is None:
            return []
        gated = []
        for call in last.tool_calls:
            config = self.interrupt_on.get(call["name"])
            if config is not None and self._should_interrupt(call, config, state, runtime):  # type: ignore[arg-type]
                gated.append(dict(call))
        return gated

    def _pending(self, gated: list[dict[str, Any]], guard: Guard) -> list[dict[str, Any]]:
        pending = []
        for call in gated:
            spec = self.guard.options.tools.get(call["name"])
            named = spec.operation_of(call.get("args") or {}) if spec is not None else None
            pending.append(
                {
                    "call_id": str(call.get("id")),
                    "tool": call["name"],
                    "kind": spec.kind if spec is not None else "read",
                    "arguments": _arguments(call.get("args"), guard.secrets),
                    "operation_id": named if isinstance(named, str) else None,
                }
            )
        return pending

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """LangChain's review, with the pause stored before it interrupts and claimed once when it resumes."""
        scope = self.guard.scope(state)
        gated = self._gated(state, runtime) if scope.run.verdict is None else []
        if not gated:
            return super().after_model(state, runtime)
        try:
            update = super().after_model(state, runtime)
        except GraphInterrupt as interrupted:
            self._pause(scope, gated)
            self._carry(scope, interrupted)
            raise
        self._claim(scope, gated, update)
        return update

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.after_model(state, runtime)

    def _pause(self, scope: Scope, gated: list[dict[str, Any]]) -> None:
        """Store the interrupt as a pause of the task (nothing when the task already ended)."""
        names = ", ".join(sorted({call["name"] for call in gated}))
        configurable = dict(get_config().get("configurable") or {})
        where = {k: configurable.get(k) for k in ("thread_id", "checkpoint_ns", "checkpoint_id")}

        def store_pause(result: Any, guard: Guard) -> str | None:
            calls = self._pending(gated, guard)
            state = json.dumps({"langgraph": where, "pending": [c["call_id"] for c in calls]})
            return guard.pause(state, calls, detail=f"{len(calls)} call(s) wait for approval: {names}").pause_id

        scope.outcome = conclude_now(
            scope.run, Ending(waiting=f"{len(gated)} call(s) wait for approval: {names}", store_pause=store_pause)
        )
        self.guard.release(scope)  # the resume, in this process or another, continues from the store

    @staticmethod
    def _carry(scope: Scope, interrupted: GraphInterrupt) -> None:
        """The stored pause's record rides in the interrupt's value, so an interrupted result tells its outcome in
        any process (:func:`pause_record`)."""
        if scope.outcome is None:
            return
        entry = {"task_id": scope.task_id, "outcome": scope.outcome.record().to_dict()}
        for interrupt in interrupted.args[0] if interrupted.args else ():
            if isinstance(getattr(interrupt, "value", None), dict):
                interrupt.value[STATE_KEY] = entry

    def _claim(self, scope: Scope, gated: list[dict[str, Any]], update: Mapping[str, Any] | None) -> None:
        """The human answered: claim the pause waiting for these calls (once) and continue its task."""
        outcome = scope.run.guard.outcome
        if outcome is None or outcome.reason is not Reason.APPROVAL:
            return  # an old checkpoint resumed again: the task goes on as the store has it
        messages = list((update or {}).get("messages", []))
        kept = {str(c.get("id")) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
        answered = {str(m.tool_call_id) for m in messages if isinstance(m, ToolMessage)}  # rejected or responded
        decisions = {}
        for call in gated:
            call_id = str(call.get("id"))
            decisions[call_id] = APPROVE if call_id in kept and call_id not in answered else REJECT
        store = scope.run.guard.store
        try:
            record = find_pause_for(store, list(decisions), task_id=scope.task_id)
        except PauseAlreadyResumed:
            return  # resumed before: this old checkpoint goes on under the task as the store has it now
        options = self.guard.options
        who = options.who or "LangGraph Command(resume=...)"
        chosen = decisions_for(record, decisions)
        claimed, _ = claim_for_resume(
            store, record, chosen, who=who, why="answered through Command(resume=...)", given=True
        )
        resumed = options.continuing(options.guard, task_id=claimed.task_id, budget=claimed.budget, store=store)
        self.guard.start(scope.task_id, resumed)
