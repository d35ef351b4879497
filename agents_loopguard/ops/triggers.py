"""Re-entry across executions (R15): a workflow that re-triggers itself through its own effects.

A flow writes a row, and the row's change fires the same flow; every activation may end fine while the chain feeds
itself. A counter in the flow restarts with every activation, so the limit has to live where every activation
meets: the store. :class:`TriggerGuard` is the flow's entry. Each activation is recorded atomically by
:meth:`Store.activate <agents_loopguard.store.base.Store.activate>`, and its id becomes the task id of the guarded
run, so every operation that run writes is recorded as the activation's. When a later event names one of those
operations as its origin, the store recognizes the chain and counts it: beyond ``max_depth`` re-entries the
activation is refused with ``stopped/trigger_chain``, in whichever process or host the event arrives.

>>> from agents_loopguard import Budget, MemoryStore
>>> from agents_loopguard.values.calls import Call
>>> store = MemoryStore()
>>> trigger = TriggerGuard(store, flow="orders-sync", max_depth=0)
>>> first = trigger.activate("evt-1")                       # a change from outside: may run
>>> guard = trigger.guard(first, budget=Budget(model_turns=0, tool_executions=2))
>>> write_id = trigger.operation_id("order-42:v2")          # the flow's namespace: never a task's operation
>>> write_id
'flow:orders-sync:order-42:v2'
>>> ticket = guard.authorize(Call("save_row", {"order": 42, "version": 2}, kind="write", operation_id=write_id))
>>> verdict = guard.settle(ticket, {"status": "ok"}, lambda c, r: {"revision": 1, "done": True, "effect": "committed"})
>>> guard.end(verdict).status
<Status.COMPLETED: 'completed'>
>>> again = trigger.activate("evt-2", origin_operation_id=write_id)  # our own write's echo
>>> again.status, again.reason
(<Status.STOPPED: 'stopped'>, <Reason.TRIGGER_CHAIN: 'trigger_chain'>)

An activation's writes live in its flow's namespace (R18): its guard refuses any other operation id, and every other
task's guard refuses ids in a flow's namespace, so a workflow can neither replay, block nor forge a task's ledger
entries, nor a task a workflow's. An activation id held by a task that is not this flow's activation is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.core import Guard, Verdict
from ..store.base import Activation, OperationState, Store
from ..values.budget import Budget, Policy
from ..values.calls import FLOW_NAMESPACE, Call, flow_operation_id
from ..values.errors import InputError, NotFoundError, StateError
from ..values.outcome import Outcome, Reason, RecordError, RecoveryRecord, Status

__all__ = ["ReservedWrite", "TriggerGuard"]

_REFUSED_BUDGET = Budget(model_turns=0, tool_executions=0)
"""The budget a refused activation's task is recorded with: it never runs anything."""


class TriggerGuard:
    """The entry of one workflow: decide, in the store, whether an activation may run.

    ``max_depth`` is the chain budget: how many times the flow may be re-activated by its own effects, directly or
    through other flows (A's write fires B, B's write fires A) (0: never; an activation from outside is depth 0).
    Activation ids are ``"<flow>:<event_id>"``, so the same event delivered to two flows is two activations, and
    delivered twice to one flow is one.

    >>> from agents_loopguard import MemoryStore
    >>> TriggerGuard(MemoryStore(), flow="orders-sync").activate("evt-1").depth
    0
    """

    def __init__(self, store: Store, *, flow: str, max_depth: int = 0, clock: Callable[[], float] = time.time) -> None:
        if not isinstance(flow, str) or not flow:
            raise ValueError("flow must be a non-empty string naming the workflow")
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
            raise ValueError(f"max_depth must be an int >= 0, got {max_depth!r}")
        self.store = store
        self.flow = flow
        self.max_depth = max_depth
        self.clock = clock

    def activation_id(self, event_id: str) -> str:
        """The activation (and task) id of ``event_id`` in this flow."""
        return f"{self.flow}:{event_id}"

    def operation_id(self, operation_id: str) -> str:
        """The ledger id of this flow's write ``operation_id``: in the flow's namespace (R18). Stamp this id on what
        the write changes, so the change's event can name it as its origin."""
        return flow_operation_id(self.flow, operation_id)

    def _origin(self, origin_operation_id: str | None) -> str | None:
        """The origin as the ledger knows it: an id outside every namespace that this flow wrote is the flow's."""
        if not origin_operation_id or origin_operation_id.startswith(FLOW_NAMESPACE):
            return origin_operation_id
        own = self.operation_id(origin_operation_id)
        return own if self.store.lookup_operation(own) is not None else origin_operation_id

    def _check_task_id(self, activation_id: str) -> None:
        """Refuse an activation whose id a task holds that is not this flow's activation (R18: not its to touch)."""
        if self.store.task(activation_id) is None:
            return
        recorded = self.store.activation(activation_id)
        if recorded is None or recorded.flow != self.flow:
            raise StateError(
                f"activation id {activation_id!r} is held by a task that is not an activation of flow "
                f"{self.flow!r}: send the event with another id"
            )

    def activate(self, event_id: str, *, origin_operation_id: str | None = None) -> Activation | Outcome:
        """Record the activation caused by ``event_id`` and decide whether the flow may run.

        ``origin_operation_id`` is the operation that produced the event, when the event carries it (the row's
        "written by" column, a header of the message...). Returns the :class:`Activation` to run (build its guard
        with :meth:`guard`), or an :class:`Outcome`: ``stopped/trigger_chain`` when the event is the flow's own
        effect beyond ``max_depth`` re-entries, or the stored outcome of an event that was already handled (the
        same event delivered twice runs once). A refused activation is recorded as a finished task, so operators
        see it like any other stop.
        """
        if not isinstance(event_id, str) or not event_id:
            raise ValueError("event_id must be a non-empty string identifying the incoming event")
        self._check_task_id(self.activation_id(event_id))
        activation = self.store.activate(
            self.flow,
            self.activation_id(event_id),
            origin_operation_id=self._origin(origin_operation_id),
            max_depth=self.max_depth,
            now=float(self.clock()),
        )
        if not activation.granted:
            return self._refused(activation)
        if activation.duplicate:
            finished = self.finished(activation.activation_id)
            if finished is not None:
                return finished
        return activation

    def guard(
        self,
        activation: Activation,
        *,
        budget: Budget,
        policy: Policy | None = None,
        secrets: Iterable[str] = (),
    ) -> Guard:
        """The guard of the run this activation starts: its task id is the activation id.

        A redelivered activation that is still running gets the same task back (its counters and ledger continue);
        build the guard for each run, never reuse one across activations.
        """
        if not activation.granted:
            raise ValueError(
                f"activation {activation.activation_id!r} was refused ({activation.reason}): do not run it"
            )
        if activation.flow != self.flow:
            raise ValueError(f"activation {activation.activation_id!r} belongs to flow {activation.flow!r}")
        return Guard(
            budget=budget,
            store=self.store,
            task_id=activation.activation_id,
            policy=policy,
            clock=self.clock,
            secrets=secrets,
            flow=self.flow,
        )

    def finished(self, task_id: str) -> Outcome | None:
        """The stored outcome of ``task_id`` (an activation that already ended), or ``None``."""
        snapshot = self.store.task(task_id)
        if snapshot is None or snapshot.outcome is None:
            return None
        try:
            return RecoveryRecord.from_json(snapshot.outcome).to_outcome()
        except RecordError as exc:
            raise RecordError(f"task {task_id!r}: {exc}") from exc

    def _refused(self, activation: Activation) -> Outcome:
        guard = Guard(
            budget=_REFUSED_BUDGET, store=self.store, task_id=activation.activation_id, clock=self.clock, flow=self.flow
        )
        if guard.outcome is not None:  # the same refused event, delivered again
            return guard.outcome
        origin = self.store.lookup_operation(activation.origin_operation_id or "")
        cause = f"operation {activation.origin_operation_id!r}" + (f" of {origin.task_id!r}" if origin else "")
        detail = (
            f"flow {self.flow!r} was activated by its own effect, {cause}: re-entry {activation.depth} of chain "
            f"{activation.chain_id!r} is beyond max_depth={self.max_depth}"
        )
        verdict = Verdict(
            Status.STOPPED,
            activation.reason or Reason.TRIGGER_CHAIN,
            detail,
            activation.origin_operation_id,
        )
        return guard.end(verdict)

    def reserve_write(
        self,
        activation: Activation,
        *,
        operation_id: str,
        tool: str,
        args: Mapping[str, Any],
        budget: Budget,
        secrets: Iterable[str] = (),
    ) -> ReservedWrite:
        """Reserve the write an activation is about to make, in the flow's namespace, before it happens (R10, R18):
        a new one is reserved ``unknown``; a committed one is a replay (its stored result, do not write again); a
        refusal (an unknown write, another payload under the id, a budget) ends the activation with it."""
        guard = self.guard(activation, budget=budget, secrets=secrets)
        namespaced = self.operation_id(operation_id)
        if guard.outcome is not None:  # a task of that id ended already (written outside the trigger)
            return ReservedWrite(namespaced, outcome=guard.outcome)
        decided = guard.authorize(Call(tool, dict(args), kind="write", operation_id=namespaced))
        if isinstance(decided, Verdict):
            return ReservedWrite(namespaced, outcome=guard.end(decided))
        return ReservedWrite(namespaced, replay=decided.replay, result=decided.result)

    def finish(
        self,
        activation_id: str,
        *,
        completed: bool,
        effect: str | None = None,
        result: Any = None,
        detail: str = "",
        secrets: Iterable[str] = (),
    ) -> Outcome:
        """End an activation with the workflow's report; its reserved write (at most one still unknown) is settled
        through the engine's rules first (``effect`` is then required). ``completed`` without a write: done;
        completed with a write that did not commit: partial; a failure: ``stopped/executor_exception``. An
        activation that already ended keeps its outcome."""
        snapshot = self.store.task(activation_id)
        if snapshot is None:
            raise NotFoundError(f"no activation {activation_id!r} in this store")
        guard = Guard(
            budget=snapshot.budget,
            store=self.store,
            task_id=activation_id,
            clock=self.clock,
            secrets=secrets,
            flow=self.flow,
        )
        if guard.outcome is not None:
            return guard.outcome
        pending = [op for op in self.store.operations(activation_id) if op.state is OperationState.UNKNOWN]
        if len(pending) > 1:
            count = len(pending)
            raise StateError(f"activation {activation_id!r} holds {count} unknown writes: reconcile them one by one")
        verdict: Verdict | None = None
        if pending:
            if effect is None:
                raise InputError(
                    f"activation {activation_id!r} reserved write {pending[0].operation_id!r}: "
                    "say its effect (committed, not_committed or unknown)"
                )
            verdict = guard.settle_reserved(
                pending[0].operation_id, effect=effect, done=completed, ok=completed, output=result
            )
        elif completed:
            verdict = Verdict(Status.COMPLETED, Reason.VALIDATED_DONE, "the workflow reported the activation done")
        if verdict is None and completed:
            detail_ = "the workflow finished; its write did not commit"
            verdict = Verdict(Status.PARTIAL, Reason.UNVERIFIED_FINAL, detail_)
        if verdict is None:
            verdict = Verdict(Status.STOPPED, Reason.EXECUTOR_EXCEPTION, detail or "the workflow reported a failure")
        return guard.end(verdict)


@dataclass(frozen=True)
class ReservedWrite:
    """What :meth:`TriggerGuard.reserve_write` decided: the ledger's (namespaced) id, and either a reservation
    (``replay``: committed already, ``result`` is its stored result) or the ``outcome`` the activation ended with."""

    operation_id: str
    replay: bool = False
    result: Any = None
    outcome: Outcome | None = None
