"""The engine: authorize a model turn, authorize and settle a tool execution, end with one outcome.

Every rule of the guard lives here, once; the adapters (Agents SDK, raw function calling) translate their events into
these calls and the verdicts back into their framework's behaviour. The engine imports no SDK and does no I/O except
through its :class:`~agents_loopguard.store.base.Store`.

The cycle of one call::

    guard.begin_turn()            # reserve a model turn (before the model is asked)
    ticket = guard.authorize(c)   # validate, fingerprint, check ledger/repetition/budget, reserve the execution
    result = execute(c)           # only when authorize returned a Ticket that is not a replay
    guard.settle(ticket, result, verify)   # verify evidence, record ledger + progress, decide
    guard.end(verdict)            # the sticky terminal Outcome

:func:`~agents_loopguard.engine.runner.create_runner` is the article's synchronous prototype built on the same engine;
:mod:`~agents_loopguard.values.calls` holds the values the engine reasons about (calls, tickets, verdicts).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..store.base import OperationState, Progress, StepRecord, Store, TaskSnapshot, TraceEntry
from ..store.memory import MemoryStore
from ..values.budget import MAX_LIMIT, Budget, Policy
from ..values.calls import KINDS, UNSET, Call, Kind, Ticket, Verdict, outside_namespace, parse_call
from ..values.canonical import CanonicalError, canonical_json, fingerprint, operation_id_problem, redact
from ..values.errors import StateError
from ..values.evidence import (
    UNVERIFIED,
    Effect,
    Evidence,
    ResultStatus,
    VerifyFailed,
    describe,
    parse_evidence,
    result_status,
    unproven,
)
from ..values.families import named_family, task_family
from ..values.outcome import Outcome, Reason, RecordError, RecoveryRecord, Status
from ..values.pricing import Price
from .detectors import Recent
from .ending import Ending
from .loops import LoopRules, transient
from .metering import Metering
from .probing import Probing
from .progress import TASK_KEY, KeyStep, ProgressKeys, progress_key

__all__ = ["KINDS", "Call", "Guard", "Kind", "Observer", "Ticket", "Verdict", "parse_call"]

Observer = Callable[[str, dict[str, Any]], None]
"""``observer(event, data)``: told of every guard decision (the SDK adapter turns them into trace spans)."""
FINGERPRINT_KEY_ENV = "LOOPGUARD_FINGERPRINT_KEY"
"""Environment variable with the HMAC key of call fingerprints, shared by every worker of a store."""
SHADOW_ENV = "LOOPGUARD_SHADOW"
"""Environment variable that puts task families in shadow mode (``all``, or families comma-separated): see
:attr:`~agents_loopguard.values.budget.Policy.shadow`."""
logger = logging.getLogger("agents_loopguard")
"""Guard decisions as standard logging records; each carries ``task_id`` (and ``reason``, ``status``, ``tool``)."""


class Guard(Metering, Ending, LoopRules, Probing, ProgressKeys):
    """The guard of one task: reserve before every call, decide from verified evidence, end with one Outcome.

    >>> from agents_loopguard import Budget
    >>> guard = Guard(budget=Budget(model_turns=5, tool_executions=5), task_id="doc-1")
    >>> verify = lambda call, result: {"revision": 0, "done": False, "effect": "none"}
    >>> for _ in range(3):
    ...     if guard.begin_turn(): break
    ...     ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": "x"}})
    ...     if isinstance(ticket, Verdict): break
    ...     guard.settle(ticket, {"status": "ok", "hits": []}, verify)
    >>> guard.end(ticket).reason
    <Reason.SAME_CALL: 'same_call'>
    """

    def __init__(
        self,
        *,
        budget: Budget,
        store: Store | None = None,
        task_id: str | None = None,
        policy: Policy | None = None,
        clock: Callable[[], float] = time.time,
        initial_revision: int = 0,
        secrets: Iterable[str] = (),
        observer: Observer | None = None,
        fingerprint_key: str | bytes | None = None,
        strict_budget: bool = False,
        prices: Mapping[str, Price] | None = None,
        flow: str | None = None,
        family: str | None = None,
    ) -> None:
        self.task_id = task_id or f"task-{uuid.uuid4().hex[:12]}"
        self.flow = flow
        """The workflow whose activation this task is (``TriggerGuard.guard`` sets it): its writes' namespace."""
        self.budget = budget
        self.store: Store = store if store is not None else MemoryStore()
        self.policy = policy or Policy()
        self.clock = clock
        self.secrets = tuple(secrets)
        self.prices = prices
        """The price table of the models, for a cost budget (see :meth:`reserve_request`)."""
        self.observer = observer
        """Told of every decision as ``observer(event, data)``; data carries no arguments or results."""
        key = fingerprint_key if fingerprint_key is not None else os.environ.get(FINGERPRINT_KEY_ENV) or None
        self._fingerprint_key = key.encode() if isinstance(key, str) else key  # None: plain sha256 fingerprints
        self._redacted_args: dict[str, Any] = {}  # fingerprint -> redacted args: a loop repeats the same call
        self._transient: dict[str, int] = {}  # fingerprint@revision -> attempts that failed transiently, no effect
        self._unverified = 0  # executions in a row that nobody verified (bounded by Policy.max_unverified)
        self._keys: dict[str, int] | None = None  # progress key -> its last revision, read once (engine.progress)
        self._named: dict[str, str] | None = None  # a write's payload -> the operation id that names it in the task
        self.recent = Recent(self.policy)
        """The calls this guard settled most recently: the repeat, cycle and error-storm rules read them."""
        self.last_good: Any = None
        self.outcome: Outcome | None = None
        """The terminal outcome once the guard has ended; every later call returns it."""
        snapshot = self.store.ensure_task(
            self.task_id, budget, revision=initial_revision, now=self._now(), family=named_family(family, flow)
        )
        self.shadow = self.policy.shadows(snapshot.family or task_family(self.task_id), os.environ.get(SHADOW_ENV))
        """True when the loop rules only record their verdicts (shadow mode, :attr:`Policy.shadow`), by the task's
        stored family."""
        self._check_budget(snapshot, strict=strict_budget)
        self.budget = snapshot.budget
        self.revision = snapshot.revision
        self.used = snapshot.used
        if snapshot.outcome is not None:
            try:
                self.outcome = RecoveryRecord.from_json(snapshot.outcome).to_outcome()
            except RecordError as exc:
                raise RecordError(f"task {self.task_id!r}: {exc}") from exc

    # --- helpers ------------------------------------------------------------------------------------------

    def _check_budget(self, snapshot: TaskSnapshot, *, strict: bool) -> None:
        """A task keeps the budget it was created with; a different one passed later is not applied silently."""
        changes = snapshot.budget_changes()
        if not changes:
            return
        listed = ", ".join(f"{name} {old!r} (asked {new!r})" for name, (old, new) in sorted(changes.items()))
        message = (
            f"task {self.task_id!r} keeps its stored budget: {listed}; limits change only by a recorded extension "
            f"(`loopguard recover {self.task_id} --who ... --why ... --more-turns N`, or recovery.recover(extend=...))"
        )
        if strict:
            raise StateError(message)
        logger.warning(message, extra={"task_id": self.task_id, "reason": None, "status": None, "tool": None})

    def _now(self) -> float:
        return float(self.clock())

    def _terminal(self) -> Verdict | None:
        if self.outcome is None:
            return None
        return Verdict(
            self.outcome.status, self.outcome.reason, "the guard has already ended", self.outcome.operation_id
        )

    def _trace(
        self, call: Call | None, result_class: str, *, at: float, fp: str | None = None, state: str | None = None
    ) -> TraceEntry:
        return TraceEntry(
            kind="tool",
            tool=call.tool if call else None,
            args=self._stored_args(call, fp) if call else None,
            result_class=result_class,
            revision=self.revision,
            models=self.used.models,
            tools=self.used.tools,
            fingerprint=fp,
            operation_id=call.operation_id if call and call.kind == "write" else None,
            operation_state=state,
            at=at,
        )

    def _stored_args(self, call: Call, fp: str | None) -> Any:
        """The call's arguments as the trace keeps them (redacted), computed once per fingerprint."""
        if fp is None:
            return redact(call.args, secrets=self.secrets)
        cached = self._redacted_args.get(fp)
        if cached is None:
            if len(self._redacted_args) >= 256:
                self._redacted_args.clear()
            cached = self._redacted_args[fp] = redact(call.args, secrets=self.secrets)
        return cached

    def _observe(self, event: str, **data: Any) -> None:
        """Tell the observer of a decision; an observer's failure never changes the decision."""
        if self.observer is None:
            return
        data["task_id"] = self.task_id
        data["models"], data["tools"], data["revision"] = self.used.models, self.used.tools, self.revision
        try:
            self.observer(event, data)
        except Exception:
            logger.exception("task %s: the observer failed on %s", self.task_id, event, extra={"task_id": self.task_id})

    def _refuse(self, call: Call | None, verdict: Verdict, *, at: float, fp: str | None = None) -> Verdict:
        self._observe(
            "call.refused", tool=call.tool if call else None, status=str(verdict.status), reason=str(verdict.reason)
        )
        self.store.append_trace(self.task_id, self._trace(call, f"refused:{verdict.reason}", at=at, fp=fp))
        tool = call.tool if call else None
        logger.info(
            "task %s: refused %s: %s/%s",
            self.task_id,
            tool or "call",
            verdict.status,
            verdict.reason,
            extra={"task_id": self.task_id, "reason": str(verdict.reason), "status": str(verdict.status), "tool": tool},
        )
        return verdict

    def _leaked(self, write: Call) -> tuple[Call, Verdict] | None:
        """A write without an operation id, or whose id holds a credential (refused and never recorded: see
        :func:`~agents_loopguard.values.canonical.operation_id_problem`): the call to trace and the verdict."""
        if not write.operation_id:
            return write, Verdict(Status.STOPPED, Reason.MISSING_OPERATION_ID, "a write needs a business operation id")
        leak = operation_id_problem(write.operation_id, secrets=self.secrets)
        if leak is None:
            return None
        return dataclasses.replace(write, operation_id=None), Verdict(Status.STOPPED, Reason.MISSING_OPERATION_ID, leak)

    def storable(self, value: Any) -> Any:
        """``value`` as it may be stored: JSON-safe and redacted."""
        return redact(value, secrets=self.secrets)

    def now(self) -> float:
        """The time on the guard's clock (the one its deadline is measured on)."""
        return float(self.clock())

    # --- the cycle ----------------------------------------------------------------------------------------

    def begin_turn(self, *, now: float | None = None) -> Verdict | None:
        """Reserve one model turn before the model is asked. Returns a :class:`Verdict` when it is refused.

        Checks, in order: the deadline, the stop mark, the model budget.
        """
        if (done := self._terminal()) is not None:
            return done
        at = self._now() if now is None else now
        if self.budget.expired(at):
            self._observe("turn.refused", reason=str(Reason.DEADLINE))
            return Verdict(Status.STOPPED, Reason.DEADLINE, f"deadline {self.budget.deadline} reached at {at}")
        grant = self.store.reserve_turn(self.task_id, now=at)
        self.used, self.revision = grant.used, max(self.revision, grant.revision)
        if not grant.granted:
            reason = grant.reason or Reason.STOP_REQUESTED
            detail = grant.detail or f"the store refused the model turn ({reason})"  # the store words its rules
            self._observe("turn.refused", reason=str(reason))
            return Verdict(Status.STOPPED, reason, detail)
        if self.observer is not None:  # inline check: building the event costs on the hot path
            self._observe("turn.reserved")
        return None

    def begin_step(self, key: str) -> StepRecord:
        """A durable engine's step (keyed by the engine's identity of it) begins in this task (R17): its record, with
        ``attempts`` above 1 when the engine re-executes it after a crash and ``done`` when the step already ended
        (see :meth:`~agents_loopguard.store.base.Store.begin_step`)."""
        step = self.store.begin_step(self.task_id, key, now=self._now())
        if step.attempts > 1 and not step.done:
            self._observe("step.reexecuted", step=key, attempts=step.attempts)
        return step

    def end_step(self, key: str, output: Any) -> None:
        """Record that a durable engine's step ended, and what the model read (stored as the trace stores values:
        redacted, JSON); a replay of the step returns it."""
        self.store.end_step(self.task_id, key, self.storable(output), now=self._now())

    def authorize(self, proposal: Any, *, now: float | None = None, retry_of: Ticket | None = None) -> Ticket | Verdict:
        """Decide whether ``proposal`` may execute, and reserve the execution if so (before it runs).

        Returns a :class:`Ticket` (execute it, or return its stored result when ``replay``) or a :class:`Verdict`
        that refuses it: invalid_call, missing_operation_id, operation_conflict, unknown_commit (needs
        reconciliation), deadline, stop_requested, same_call / wait_budget, tool_budget.

        A transient failure without effect (retryable, effect none / not_committed) lets the fingerprint run once
        more than ``Policy.max_same_call`` at that revision, whoever proposes it again (with
        ``Policy.retry_transient``; without it, only an adapter's retry, marked by ``retry_of``): the retry is
        still reserved and counted like any execution, and the error-storm rule and the budgets bound it.

        The repeat rule (:class:`~agents_loopguard.engine.detectors.Recent`) refuses a call that would start again a
        block of calls repeated without progress (``same_call``, ``cycle``). In shadow mode the loop rules record
        their would-be verdicts and refuse nothing.
        """
        if (done := self._terminal()) is not None:
            return done
        at = self._now() if now is None else now
        call = parse_call(proposal)
        if isinstance(call, str):
            return self._refuse(None, Verdict(Status.STOPPED, Reason.INVALID_CALL, call), at=at)
        try:
            fp = fingerprint(call.tool, call.identity(), key=self._fingerprint_key)
        except CanonicalError as exc:
            return self._refuse(call, Verdict(Status.STOPPED, Reason.INVALID_CALL, str(exc)), at=at)
        if self.budget.expired(at):
            return self._refuse(call, Verdict(Status.STOPPED, Reason.DEADLINE, "deadline reached"), at=at, fp=fp)
        if call.kind == "write" and (leaked := self._leaked(call)) is not None:
            return self._refuse(*leaked, at=at, fp=fp)
        if call.kind == "write" and (refused := self._unnamed(call, fp)) is not None:
            return self._refuse(call, refused, at=at, fp=fp)
        repeated = self.recent.repeat(call, fp)
        if repeated is not None and self._loop_verdict(call, repeated, at=at, fp=fp) is not None:
            return self._refuse(call, repeated, at=at, fp=fp)
        poll = call.kind == "poll"
        retried = self.policy.retry_transient or (retry_of is not None and retry_of.fingerprint == fp)
        retries = self._transient.get(f"{fp}@{self.revision}", 0) if retried else 0
        max_repeats = (self.policy.max_polls if poll else self.policy.max_same_call) + retries
        max_wait = self.policy.max_wait if poll else None
        if self.shadow:  # the store is told no limit; this guard counts what it would have refused
            self._shadow_repeat(call, fp, at=at, max_repeats=max_repeats, max_wait=max_wait, record=not repeated)
            max_repeats, max_wait = MAX_LIMIT, None
        limit = (call.tool, call.max_executions) if call.max_executions is not None else None
        if call.kind == "write":
            assert call.operation_id is not None
            # one store step: the ledger first (no counter moves for a replay, a conflict or an unknown write),
            # then the execution and the operation together
            reservation = self.store.reserve_write(
                self.task_id, call.operation_id, fp, call.tool, max_repeats=max_repeats, now=at, tool_limit=limit
            )
            granted, claim = reservation.grant, reservation.claim
            if granted is not None:
                self.used, self.revision = granted.used, max(self.revision, granted.revision)
            if claim is not None and not claim.claimed:  # in the ledger already, or reserved by another worker
                rec = claim.record
                decided = self._existing_operation(call, proposal, fp, rec.payload, rec.state, rec.result)
                if isinstance(decided, Ticket):
                    return decided
                verdict = decided or Verdict(
                    Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT, "reserved by another worker", call.operation_id
                )
                return self._refuse(call, verdict, at=at, fp=fp)
            assert granted is not None, "reserve_write answers with a grant or an unclaimed record"
            grant = granted
        else:
            grant = self.store.reserve_execution(
                self.task_id,
                fp,
                max_repeats=max_repeats,
                now=at,
                max_wait=max_wait,
                poll=poll,
                tool_limit=limit,
            )
            self.used, self.revision = grant.used, max(self.revision, grant.revision)
        if not grant.granted:
            reason = grant.reason or Reason.STOP_REQUESTED
            detail = f"{call.tool}: {grant.detail or f'the store refused the execution ({reason})'}"
            return self._refuse(call, Verdict(Status.STOPPED, reason, detail), at=at, fp=fp)
        if self.observer is not None:
            self._observe("call.authorized", tool=call.tool, kind=call.kind, operation_id=call.operation_id)
        return Ticket(call, proposal, fp, grant.revision, used=grant.used)

    def _unnamed(self, call: Call, fp: str) -> Verdict | None:
        """The refusal of a write whose operation id names no operation of this task (``None``: it names one): no
        id, an id in another namespace (R18), or a second id for the same arguments (:meth:`_renamed`)."""
        if not call.operation_id:
            return Verdict(Status.STOPPED, Reason.MISSING_OPERATION_ID, "a write needs a business operation id")
        return outside_namespace(call, self.flow) or self._renamed(call, fp)

    def _renamed(self, call: Call, fp: str) -> Verdict | None:
        """R20: a tool's declared ``operation_id(args)`` names each payload (canonical arguments) once in a task; a
        second id for the same arguments would run the same write twice, so it is refused (``None``: it may go
        on). The task's ledger is read once per guard, then kept as its writes are reserved."""
        if not call.named_by_args:
            return None
        if self._named is None:
            self._named = {op.payload: op.operation_id for op in self.store.operations(self.task_id)}
        named = self._named.setdefault(fp, str(call.operation_id))
        if named == call.operation_id:
            return None
        detail = (
            f"{call.tool}: operation_id(args) named these arguments {named!r} before and {call.operation_id!r} now: "
            "an operation id must come from the arguments alone (no time, counter or random part), or the same "
            "write would run twice"
        )
        return Verdict(Status.STOPPED, Reason.OPERATION_CONFLICT, detail, call.operation_id)

    def _existing_operation(
        self, call: Call, proposal: Any, fp: str, payload: str, state: OperationState, result: Any
    ) -> Ticket | Verdict | None:
        """The rule for a write whose operation id is already in the ledger (None: it may execute again)."""
        if payload != fp:
            return Verdict(
                Status.STOPPED,
                Reason.OPERATION_CONFLICT,
                f"operation {call.operation_id!r} already names another payload",
                call.operation_id,
            )
        if state is OperationState.COMMITTED:
            self._observe("call.replayed", tool=call.tool, kind=call.kind, operation_id=call.operation_id)
            return Ticket(call, proposal, fp, self.revision, replay=True, result=result, used=self.used)
        if state is OperationState.UNKNOWN:
            return Verdict(
                Status.NEEDS_RECONCILIATION,
                Reason.UNKNOWN_COMMIT,
                f"operation {call.operation_id!r} has an unknown result: query the receiver before sending it again",
                call.operation_id,
            )
        return None  # not_committed: a verified non-execution may be retried within the budget

    def fail(self, ticket: Ticket, error: BaseException, *, reason: Reason = Reason.EXECUTOR_EXCEPTION) -> Verdict:
        """The executor raised (or timed out): a write stays ``unknown`` and needs reconciliation; a read stops."""
        call = ticket.call
        write = call.kind == "write"
        state = str(OperationState.UNKNOWN) if write else None
        self.store.append_trace(
            self.task_id,
            self._trace(call, f"exception:{type(error).__name__}", at=self._now(), fp=ticket.fingerprint, state=state),
        )
        status = Status.NEEDS_RECONCILIATION if write else Status.STOPPED
        self._observe("call.failed", tool=call.tool, error=type(error).__name__, status=str(status), reason=str(reason))
        detail = redact(f"{type(error).__name__}: {error}", secrets=self.secrets)
        return Verdict(status, reason, detail, call.operation_id if write else None)

    def settle(
        self,
        ticket: Ticket,
        result: Any,
        verify: Callable[[Any, Any], Any] | None = None,
        *,
        evidence: Any = UNSET,
    ) -> Verdict | None:
        """Validate ``result`` and its evidence; record the ledger and progress; decide.

        The evidence is either what ``verify(proposal, result)`` returns (the engine calls it only for a valid
        result, as the article's runner does) or, for adapters that ran the application's check themselves
        (possibly async), the value it returned passed as ``evidence=`` (a :class:`~agents_loopguard.values.evidence.
        VerifyFailed` when it raised).

        Returns ``None`` to continue, or a :class:`Verdict`: invalid_result, invalid_evidence, unknown_commit,
        deadline, fatal, approval (needs_human), validated_done (completed), retry_after_commit, cursor_cycle,
        no_progress. A verifier that raises or returns garbage is invalid evidence, never an exception out of the
        guard.

        >>> from agents_loopguard import Budget
        >>> guard = Guard(budget=Budget(model_turns=2, tool_executions=2))
        >>> ticket = guard.authorize({"tool": "search", "kind": "read", "args": {"q": "x"}})
        >>> guard.settle(ticket, {"status": "ok"}, evidence={"revision": 1, "done": True, "effect": "none"}).reason
        <Reason.VALIDATED_DONE: 'validated_done'>
        """
        if (verify is None) == (evidence is UNSET):
            raise TypeError("settle() takes either verify= (a callable) or evidence= (what verify returned)")
        verdict = self._settle(ticket, result, verify, evidence)
        if self.observer is not None:
            self._observe(
                "call.settled",
                tool=ticket.call.tool,
                replay=ticket.replay,
                status=str(verdict.status) if verdict else None,
                reason=str(verdict.reason) if verdict else None,
            )
        return verdict

    def settle_reserved(
        self, operation_id: str, *, effect: str, done: bool = False, ok: bool = True, output: Any = None
    ) -> Verdict | None:
        """Settle a write this task reserved in an earlier step (another request or process: a workflow over HTTP
        reports how its write went), through the rules of :meth:`settle`: ``effect`` (``committed``,
        ``not_committed``, ``unknown``) is the application's evidence, ``done`` says the task is done with it,
        ``ok=False`` reports a failed attempt, ``output`` is the write's result (stored for a committed write).
        ``StateError`` when the task holds no reserved (unknown) write of that id.

        >>> from agents_loopguard import Budget, MemoryStore
        >>> guard = Guard(budget=Budget(0, 1), store=MemoryStore(), task_id="t-later")
        >>> ticket = guard.authorize({"tool": "save", "kind": "write", "operation_id": "op-1", "args": {"n": 1}})
        >>> later = Guard(budget=Budget(0, 1), store=guard.store, task_id="t-later")  # another request
        >>> later.settle_reserved("op-1", effect="committed", done=True, output="saved").reason
        <Reason.VALIDATED_DONE: 'validated_done'>
        """
        record = next((op for op in self.store.operations(self.task_id) if op.operation_id == operation_id), None)
        if record is None or record.state is not OperationState.UNKNOWN:
            raise StateError(f"task {self.task_id!r} holds no reserved write {operation_id!r}")
        trace = reversed(self.store.trace(self.task_id))
        reserved = (e.args for e in trace if e.operation_id == operation_id and e.kind == "tool")
        args = next((a for a in reserved if isinstance(a, dict)), {})  # as reserved (already redacted)
        call = Call(record.tool, args, kind="write", operation_id=operation_id)
        committed = effect == "committed"
        revision = self.progress_revision(call) + int(committed)
        evidence = {"revision": revision, "done": committed and done, "effect": effect}
        result = {"status": "ok" if ok else "retryable", "output": output}
        return self.settle(Ticket(call, call, record.payload, self.revision), result, evidence=evidence)

    def _settle(
        self, ticket: Ticket, result: Any, verify: Callable[[Any, Any], Any] | None, evidence: Any
    ) -> Verdict | None:
        key = progress_key(ticket.call, self.policy)  # whose revision the verify reports (engine.progress)
        judged = self._judge(ticket, result, verify, evidence, key)
        if isinstance(judged, Verdict):
            return judged
        status, proof = judged
        at = self._now()
        early = self._early_end(status, at)
        progress, step = self._record(ticket, result, status, proof, key, early=early, at=at)
        if early is not None:
            return early
        return self._decide(ticket, result, status, proof, progress, step)

    def _judge(
        self, ticket: Ticket, result: Any, verify: Callable[[Any, Any], Any] | None, evidence: Any, key: str
    ) -> tuple[ResultStatus, Evidence] | Verdict:
        """Step 1: is the result valid, is the evidence valid, is a write's effect proven? (trace what is not)"""
        call = ticket.call
        write = call.kind == "write"
        lost = Status.NEEDS_RECONCILIATION if write else Status.STOPPED
        op_id = call.operation_id if write else None
        status = result_status(result)
        if status is None:
            self._trace_only(ticket, "invalid_result")
            return Verdict(lost, Reason.INVALID_RESULT, "the executor returned no valid status", op_id)
        if write and not ticket.replay and not _is_json(result):  # stored exactly, or not at all
            self._trace_only(ticket, "invalid_result", state=str(OperationState.UNKNOWN))
            detail = (
                f"the write's result ({describe(result)}) is not JSON data (NaN, infinity, a cycle or another "
                "type): it cannot be stored as the tool returned it, so the write stays unknown"
            )
            return Verdict(lost, Reason.INVALID_RESULT, detail, op_id)
        if verify is not None:
            try:
                evidence = verify(ticket.proposal, result)
            except Exception as exc:  # the verifier's failure is invalid evidence, not a crash
                evidence = VerifyFailed(exc)
        current = self._key_revision(key, ticket)  # its progress key's last revision
        if evidence is UNVERIFIED and not write:
            return status, Evidence(revision=current, done=False, effect=Effect.NONE, verified=False)
        proof = parse_evidence(evidence, status=status, current_revision=current, key=None if key == TASK_KEY else key)
        if isinstance(proof, str):
            self._trace_only(ticket, "invalid_evidence")
            return Verdict(lost, Reason.INVALID_EVIDENCE, proof, op_id)
        if write and (
            proof.effect not in (Effect.COMMITTED, Effect.NOT_COMMITTED)
            or (ticket.replay and proof.effect is not Effect.COMMITTED)
            or (proof.done and proof.effect is not Effect.COMMITTED)
        ):
            self._trace_only(ticket, "unknown_effect", state=str(OperationState.UNKNOWN))
            why = unproven(proof, op_id if ticket.replay else None)
            return Verdict(Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT, why, op_id)
        return status, proof

    def _trace_only(self, ticket: Ticket, result_class: str, *, state: str | None = None) -> None:
        entry = self._trace(ticket.call, result_class, at=self._now(), fp=ticket.fingerprint, state=state)
        self.store.append_trace(self.task_id, entry)

    def _early_end(self, status: ResultStatus, at: float) -> Verdict | None:
        """The verdicts that end the task before the progress rules apply (its progress is not recorded)."""
        if self.budget.expired(at):
            return Verdict(Status.STOPPED, Reason.DEADLINE, "deadline passed during the execution")
        if status is ResultStatus.FATAL:
            return Verdict(Status.STOPPED, Reason.FATAL, "the executor reported a fatal result")
        if status is ResultStatus.NEEDS_HUMAN:
            return Verdict(Status.NEEDS_HUMAN, Reason.APPROVAL, "the executor asked for a human")
        return None

    def _record(
        self,
        ticket: Ticket,
        result: Any,
        status: ResultStatus,
        proof: Evidence,
        key: str,
        *,
        early: Verdict | None,
        at: float,
    ) -> tuple[Progress, KeyStep]:
        """Step 2: one store step records the trace, the write's ledger state and the progress (its progress key's
        new revision, and the task's)."""
        call = ticket.call
        write = call.kind == "write"
        op_id = call.operation_id if write else None
        page = call.kind == "page" and early is None
        seen = ([f"cursor:{proof.cursor}"] if page and proof.cursor is not None else []) + (
            [f"record:{r}" for r in proof.records] if page else []
        )
        operation = (op_id, OperationState(proof.effect.value), self.storable(result)) if write and op_id else None
        pending = proof.pending and call.kind == "poll"
        # a transient failure without effect is a retry, not a stall (Policy.retry_transient)
        retry = status is ResultStatus.RETRYABLE and self.policy.retry_transient and transient(status, proof)
        retry = retry and proof.revision <= self._key_revision(key, ticket)
        # a pending poll is no stall; an unverified read records no progress at all
        step = self._key_step(ticket, proof, key, record=early is None and proof.verified and not retry)
        progress = self.store.record_execution(
            self.task_id,
            self._trace(
                call,
                _result_class(ticket, status, proof, pending),
                at=at,
                fp=ticket.fingerprint,
                state=str(proof.effect) if write else None,
            ),
            revision=step.task_revision,
            pending=pending,
            operation=operation,
            seen=seen,
            key=step.stored,
        )
        self.used = progress.used
        self._key_recorded(step, proof)
        return progress, step

    def _decide(
        self, ticket: Ticket, result: Any, status: ResultStatus, proof: Evidence, progress: Progress, step: KeyStep
    ) -> Verdict | None:
        """Step 3: the progress rules on what was recorded: done, a retry after a commit, then the loop rules."""
        call = ticket.call
        write = call.kind == "write"
        if status is ResultStatus.OK:
            self.last_good = result
        self.revision = max(self.revision, progress.revision)
        if proof.done:
            return Verdict(
                Status.COMPLETED, Reason.VALIDATED_DONE, "the application validated the task as done", value=result
            )
        if status is ResultStatus.RETRYABLE and write and proof.effect is not Effect.NOT_COMMITTED:
            return Verdict(
                Status.NEEDS_RECONCILIATION,
                Reason.RETRY_AFTER_COMMIT,
                "a retryable failure of a write that committed: do not send it again",
                call.operation_id,
            )
        return self._loop_rules(ticket, proof, progress, failed=transient(status, proof), advanced=step.advanced)


def _result_class(ticket: Ticket, status: ResultStatus, proof: Evidence, pending: bool) -> str:
    """How the trace names a result: ``cached`` (a committed write's replay), ``pending`` (a poll still waiting),
    ``unverified`` (an ok result nobody verified), else the result's status."""
    if ticket.replay:
        return "cached"
    if pending:
        return "pending"
    if not proof.verified and status is ResultStatus.OK:
        return "unverified"
    return status._value_  # the enum's str() without its lookup: one per settled call


def _is_json(value: Any) -> bool:
    """True when ``value`` is JSON data that the ledger stores exactly (RFC 8785 canonical form)."""
    try:
        canonical_json(value)
    except CanonicalError:
        return False
    return True
