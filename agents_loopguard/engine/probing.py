"""Asking the receiver (R10, R20): a write whose answer was lost may be settled by its tool's read-only
``probe(operation_id, args)``, which asks the receiving system by the operation's stable id. The guard reserves each
probe like a tool execution (within the deadline, the task's budget and ``Policy.max_probes`` per lost answer) and
records the receiver's answer like an operator's reconciliation, through the same ledger transition
(:meth:`~agents_loopguard.store.base.Store.settle_operation`, kind ``reconcile``, who ``probe:<tool>``, the
evidence as why): ``committed`` stores the receiver's result (later calls of the operation return it),
``not_committed`` allows a new attempt within the budget; ``unknown``, a probe that raises or answers garbage
records nothing and the operation stays unknown (a human reconciles it).

The guarded run decides *when* an answer was lost (the body raised, a durable engine re-executes a step whose worker
died); these methods are the rules of the probe itself.

>>> from agents_loopguard import Budget, Guard, MemoryStore
>>> from agents_loopguard.values.probes import committed
>>> guard = Guard(budget=Budget(3, 3), store=MemoryStore(), task_id="t-probe")
>>> ticket = guard.authorize({"tool": "refund", "kind": "write", "operation_id": "refund-A-17", "args": {"n": 80}})
>>> _ = guard.fail(ticket, TimeoutError("no response"))            # the refund's answer was lost
>>> guard.begin_probe(ticket, attempt=1) is None                   # reserved like a tool execution
True
>>> guard.record_probe(ticket, committed({"refund": "r-9"}, evidence="refund r-9 at the provider")).state
'committed'
>>> [(t.kind, t.who, t.why) for t in guard.store.transitions("t-probe")]
[('reconcile', 'probe:refund', 'refund r-9 at the provider')]
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..store.base import OperationState, Store, TraceEntry
from ..values.budget import MAX_LIMIT, Budget, Policy
from ..values.calls import Ticket, Verdict, parse_call
from ..values.canonical import CanonicalError, canonical_json, fingerprint
from ..values.errors import NotFoundError, StateError
from ..values.outcome import Reason, Status, Usage
from ..values.probes import ProbeAnswer, parse_probe_answer

__all__ = ["PROBE_WHO", "Probing"]

PROBE_WHO = "probe:"
"""How the ledger's transitions name a probe's answer: ``probe:<tool>`` (an operator's run of it adds who ran it)."""
logger = logging.getLogger("agents_loopguard")


class Probing:
    """The probe rules of a :class:`~agents_loopguard.Guard` (a part of it: these methods are the guard's)."""

    task_id: str
    budget: Budget
    store: Store
    policy: Policy
    used: Usage
    revision: int
    clock: Callable[[], float]
    storable: Callable[[Any], Any]
    _observe: Callable[..., None]
    _fingerprint_key: bytes | None

    def lost_operation(self, ticket: Ticket) -> bool:
        """True when the ledger holds the write of ``ticket`` as this task's ``unknown`` operation with the same
        payload: the only state a probe may settle.

        >>> from agents_loopguard import Budget, Guard, MemoryStore
        >>> guard = Guard(budget=Budget(1, 1), store=MemoryStore())
        >>> guard.lost_operation(guard.authorize({"tool": "t", "kind": "write", "operation_id": "o", "args": {}}))
        True
        """
        op_id = ticket.call.operation_id
        if ticket.call.kind != "write" or not op_id:
            return False
        record = self.store.lookup_operation(op_id)
        return (
            record is not None
            and record.state is OperationState.UNKNOWN
            and record.task_id == self.task_id
            and record.payload == ticket.fingerprint
        )

    def held_write(self, proposal: Any) -> Ticket | None:
        """A ticket for the write ``proposal`` makes when the ledger holds it as this task's ``unknown`` operation
        (an attempt reserved it and its answer was lost: a worker that died, a durable engine's re-executed step),
        to probe with; ``None`` otherwise.

        >>> from agents_loopguard import Budget, Guard, MemoryStore
        >>> guard, write = Guard(budget=Budget(1, 2)), {"tool": "t", "kind": "write", "operation_id": "o", "args": {}}
        >>> guard.held_write(write), guard.held_write(guard.authorize(write).proposal).call.operation_id
        (None, 'o')
        """
        call = parse_call(proposal)
        if isinstance(call, str) or call.kind != "write" or not call.operation_id:
            return None
        try:
            fp = fingerprint(call.tool, call.identity(), key=self._fingerprint_key)
        except CanonicalError:
            return None
        ticket = Ticket(call, proposal, fp, self.revision, used=self.used)
        return ticket if self.lost_operation(ticket) else None

    def begin_probe(self, ticket: Ticket, *, attempt: int) -> Verdict | None:
        """Reserve one probe of the receiver about ``ticket``'s write, before it is asked: refused (a
        :class:`Verdict` that leaves the operation unknown) past ``Policy.max_probes`` attempts, past the deadline,
        or when the store refuses a tool execution (the task's budget, its stop mark)."""
        call = ticket.call
        if attempt > self.policy.max_probes:
            return self._no_probe(ticket, f"{self.policy.max_probes} probes of the receiver did not settle it")
        at = float(self.clock())
        if self.budget.expired(at):
            return self._no_probe(ticket, "the deadline passed before the receiver could be asked", Reason.DEADLINE)
        fp = fingerprint(f"{call.tool}#probe", {"operation_id": call.operation_id}, key=self._fingerprint_key)
        grant = self.store.reserve_execution(self.task_id, fp, max_repeats=MAX_LIMIT, now=at)
        self.used, self.revision = grant.used, max(self.revision, grant.revision)
        if not grant.granted:
            reason = grant.reason or Reason.STOP_REQUESTED
            return self._no_probe(ticket, f"the receiver was not asked: {grant.detail or reason}", reason)
        self._observe("operation.probing", tool=call.tool, operation_id=call.operation_id, attempt=attempt)
        return None

    def _no_probe(self, ticket: Ticket, why: str, reason: Reason = Reason.UNKNOWN_COMMIT) -> Verdict:
        self._trace_probe(ticket, "probe_refused", OperationState.UNKNOWN, why)
        detail = f"operation {ticket.call.operation_id!r} stays unknown: {why}"
        return Verdict(Status.NEEDS_RECONCILIATION, reason, detail, ticket.call.operation_id)

    def record_probe(self, ticket: Ticket, answer: Any, *, error: BaseException | None = None) -> ProbeAnswer | None:
        """Record what the probe of ``ticket``'s write answered (``error``: it raised): ``committed`` and
        ``not_committed`` through the ledger transition an operator's reconciliation uses (kind ``reconcile``, who
        ``probe:<tool>``, the evidence as why); returns the answer. ``unknown`` is traced and returned, nothing else
        recorded; a probe that raised or answered garbage, or an operation that changed meanwhile, is traced and
        returns ``None``. The operation stays unknown in those cases."""
        call = ticket.call
        raised = f"the probe raised {type(error).__name__}: {error}" if error is not None else None
        parsed = raised or parse_probe_answer(answer)
        if isinstance(parsed, ProbeAnswer) and parsed.state == "committed" and not _json(parsed.result):
            parsed = "the probe's committed result is not JSON data: it cannot be stored as the receiver's result"
        if isinstance(parsed, str):
            self._trace_probe(ticket, "probe_invalid", OperationState.UNKNOWN, parsed)
            return None
        state = OperationState(parsed.state)
        evidence = str(self.storable(parsed.evidence)) or f"the receiver answered {state}"
        if state is OperationState.UNKNOWN:
            self._trace_probe(ticket, "probe_unknown", state, evidence)
            return parsed
        stored = self.storable({"status": "ok", "output": parsed.result}) if parsed.result is not None else None
        assert call.operation_id is not None, "only a write is probed"
        try:
            self.store.settle_operation(
                call.operation_id,
                state,
                stored,
                expected=OperationState.UNKNOWN,
                who=f"{PROBE_WHO}{call.tool}",
                why=evidence,
                kind="reconcile",
                now=float(self.clock()),
            )
        except (StateError, NotFoundError) as exc:  # answered meanwhile (an operator, another worker)
            self._trace_probe(ticket, "probe_invalid", OperationState.UNKNOWN, f"not recorded: {exc}")
            return None
        self._trace_probe(ticket, f"probe_{state}", state, evidence)
        logger.info(
            "task %s: the probe of %s answered %s",
            self.task_id,
            call.operation_id,
            state,
            extra={"task_id": self.task_id, "reason": None, "status": None, "tool": call.tool},
        )
        return parsed

    def _trace_probe(self, ticket: Ticket, result_class: str, state: OperationState, why: str) -> None:
        call = ticket.call
        self._observe("operation.probed", tool=call.tool, operation_id=call.operation_id, result=result_class)
        entry = TraceEntry(
            kind="probe",
            tool=call.tool,
            args=self.storable({"why": why}),
            result_class=result_class,
            revision=self.revision,
            models=self.used.models,
            tools=self.used.tools,
            fingerprint=ticket.fingerprint,
            operation_id=call.operation_id,
            operation_state=str(state),
            at=float(self.clock()),
        )
        self.store.append_trace(self.task_id, entry)


def _json(value: Any) -> bool:
    try:
        canonical_json(value)
    except CanonicalError:
        return False
    return True
