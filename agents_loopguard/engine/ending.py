"""The guard's steps besides the call cycle: the stop mark, the model's answers in the timeline, an approval pause,
and the end (one sticky outcome). A part of :class:`~agents_loopguard.Guard` (these methods are the guard's); the
call cycle itself is in :mod:`~agents_loopguard.engine.core`.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..store.base import Store, TraceEntry
from ..values.calls import UNSET, Verdict
from ..values.canonical import operation_id_problem, redact
from ..values.digests import pause_digest
from ..values.outcome import Outcome, Reason, RecordError, RecoveryRecord, Status, Usage

__all__ = ["Ending"]

logger = logging.getLogger("agents_loopguard")


class Ending:
    """How a :class:`~agents_loopguard.Guard`'s task is paused and ended (a part of the guard)."""

    task_id: str
    store: Store
    used: Usage
    revision: int
    secrets: tuple[str, ...]
    last_good: Any
    outcome: Outcome | None
    clock: Callable[[], float]

    if TYPE_CHECKING:  # the guard's own (core)

        def _terminal(self) -> Verdict | None: ...
        def _now(self) -> float: ...
        def _observe(self, event: str, **data: Any) -> None: ...
        def storable(self, value: Any) -> Any: ...
        def now(self) -> float: ...

    def check_stop(self) -> Verdict | None:
        """The stop mark, read without reserving anything (before a handoff, a pending job, a sub-agent).

        >>> from agents_loopguard import Budget, Guard, MemoryStore
        >>> store = MemoryStore()
        >>> guard = Guard(budget=Budget(1, 1), store=store, task_id="t-stop")
        >>> _ = store.request_stop("t-stop", "operator")
        >>> guard.check_stop().reason
        <Reason.STOP_REQUESTED: 'stop_requested'>
        """
        if (done := self._terminal()) is not None:
            return done
        snapshot = self.store.task(self.task_id)
        if snapshot is None or snapshot.stop_reason is None:
            return None
        return Verdict(Status.STOPPED, Reason.STOP_REQUESTED, f"stop mark: {snapshot.stop_reason}")

    def record_model_answer(self, result_class: str) -> None:
        """Trace what a model attempt gave (``answered``, ``error:<status>``...), with the counters after it."""
        entry = TraceEntry(
            kind="model",
            result_class=result_class,
            revision=self.revision,
            models=self.used.models,
            tools=self.used.tools,
            at=self.now(),
        )
        self.store.append_trace(self.task_id, entry)

    def record_unguarded(self, tool: str, why: str, *, result_class: str = "outside") -> None:
        """Trace that ``tool`` runs by the application's opt-out (``RunOptions.unguarded``), and why: an entry of
        kind ``unguarded``, never a tool execution (``result_class``: ``outside``, a body the guard cannot reach;
        ``undeclared``, a body it reserves as a read nobody verifies). Operators see it in the task's timeline.

        >>> from agents_loopguard import Budget, Guard, MemoryStore
        >>> guard = Guard(budget=Budget(1, 1), store=MemoryStore(), task_id="t-outside")
        >>> guard.record_unguarded("web_search", "read-only search at the provider")
        >>> [(e.kind, e.tool, e.args, e.result_class) for e in guard.store.trace("t-outside")]
        [('unguarded', 'web_search', {'why': 'read-only search at the provider'}, 'outside')]
        """
        entry = TraceEntry(
            kind="unguarded",
            tool=tool,
            args=self.storable({"why": why}),
            result_class=result_class,
            revision=self.revision,
            models=self.used.models,
            tools=self.used.tools,
            at=self.now(),
        )
        self.store.append_trace(self.task_id, entry)

    def pause(
        self,
        state: str,
        pending_calls: Sequence[Mapping[str, Any]],
        *,
        detail: str = "",
        result: Any = None,
        key: str | bytes | None = None,
    ) -> Outcome:
        """End the task as ``needs_human/approval`` with a stored pause: the serialized run ``state`` and its
        ``pending_calls`` with the task's limits and counters, in one store step (sticky like :meth:`end`;
        ``result`` is the adapter's own result object, kept on the outcome).

        The digest of the pause covers the task, the state and the calls (see
        :func:`~agents_loopguard.values.digests.pause_digest`: an HMAC with ``key`` or ``$LOOPGUARD_PAUSE_KEY``); a
        resume checks it before anything runs.

        >>> from agents_loopguard import Budget, Guard, MemoryStore
        >>> store = MemoryStore()
        >>> guard = Guard(budget=Budget(4, 2), store=store, task_id="t-pause")
        >>> outcome = guard.pause("{}", [{"call_id": "c1", "tool": "wipe", "arguments": "{}"}])
        >>> outcome.status, store.pause(outcome.pause_id).status
        (<Status.NEEDS_HUMAN: 'needs_human'>, 'pending')
        """
        if self.outcome is not None:
            return self.outcome
        calls = [self._unleaked(call) for call in pending_calls]
        pause_id = f"pause-{uuid.uuid4().hex[:16]}"
        self._refresh()
        outcome = Outcome(
            Status.NEEDS_HUMAN,
            Reason.APPROVAL,
            task_id=self.task_id,
            revision=self.revision,
            used=self.used,
            detail=redact(detail, secrets=self.secrets),
            pause_id=pause_id,
            result=result,
            secrets=self.secrets,
        )
        self.store.save_pause(
            self.task_id,
            pause_id,
            state,
            calls,
            digest=pause_digest(self.task_id, state, calls, key=key),
            outcome=outcome.record().to_dict(),
            now=self._now(),
        )
        self.outcome = outcome
        self._observe("outcome", status=str(outcome.status), reason=str(outcome.reason), operation_id=None)
        return outcome

    def _unleaked(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """A pending call as a pause stores it: an operation id that holds a credential is not kept (the guard
        refuses that write once approved, see :func:`~agents_loopguard.values.canonical.operation_id_problem`)."""
        kept = dict(call)
        named = kept.get("operation_id")
        if isinstance(named, str) and operation_id_problem(named, secrets=self.secrets) is not None:
            kept["operation_id"] = None
        return kept

    def _refresh(self) -> None:
        """Take the task's counters and revision from the store (other workers may have moved them)."""
        snapshot = self.store.committed_task(self.task_id)
        if snapshot is not None:
            self.used = snapshot.used
            self.revision = max(self.revision, snapshot.revision)

    def end(
        self,
        verdict: Verdict,
        *,
        in_flight: Sequence[str] = (),
        pause_id: str | None = None,
        result: Any = None,
        final_output: Any = None,
    ) -> Outcome:
        """Make ``verdict`` the terminal outcome (sticky: once ended, every call returns the first outcome).

        The store keeps the first outcome of a task: when another worker finished it first, this guard ends with
        that stored outcome, not with ``verdict``. ``final_output`` (the model's last answer) is stored with it,
        redacted, so a later replay of the finished task still carries it.
        """
        if self.outcome is not None:
            return self.outcome
        self._refresh()
        outcome = Outcome(
            status=verdict.status,
            reason=verdict.reason,
            task_id=self.task_id,
            revision=self.revision,
            value=self.last_good if verdict.value is UNSET else verdict.value,
            used=self.used,
            operation_id=verdict.operation_id,
            detail=redact(verdict.detail, secrets=self.secrets),  # details quote values: keep secrets out of records
            in_flight=tuple(in_flight),
            pause_id=pause_id,
            final_output=self.storable(final_output) if final_output is not None else None,
            result=result,
            secrets=self.secrets,
        )
        record = outcome.record().to_dict()
        kept = self.store.finish(self.task_id, record, now=self._now())
        if kept != record:  # another worker ended the task first: its outcome is the task's
            try:
                stored = RecoveryRecord.from_json(kept).to_outcome()
            except RecordError as exc:
                raise RecordError(f"task {self.task_id!r}: {exc}") from exc
            outcome = dataclasses.replace(stored, result=result, secrets=self.secrets)
        self.outcome = outcome
        self._observe(
            "outcome", status=str(outcome.status), reason=str(outcome.reason), operation_id=outcome.operation_id
        )
        logger.log(
            logging.INFO
            if outcome.status is Status.COMPLETED or outcome.reason is Reason.UNVERIFIED_FINAL
            else logging.WARNING,
            "task %s: %s/%s (models %d, tools %d, revision %d)%s",
            self.task_id,
            outcome.status,
            outcome.reason,
            outcome.used.models,
            outcome.used.tools,
            outcome.revision,
            f": {outcome.detail}" if outcome.detail else "",
            extra={"task_id": self.task_id, "reason": str(outcome.reason), "status": str(outcome.status), "tool": None},
        )
        return outcome

    def finish(self, status: Status, reason: Reason, detail: str = "", **kwargs: Any) -> Outcome:
        """Shortcut for ``end(Verdict(status, reason, detail), ...)``."""
        return self.end(Verdict(status, reason, detail), **kwargs)
