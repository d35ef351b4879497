"""Terminal outcomes: the status, the reason code, and the recovery record with its allowed next actions.

Every guarded run ends with exactly one :class:`Outcome`. It is sticky: a finished guard returns the same object on
every later call and executes nothing. :meth:`Outcome.record` turns it into a :class:`RecoveryRecord`, the JSON
document an operator or a later process reads to decide what to do next.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from .canonical import redact

__all__ = [
    "LOOP_REASONS",
    "NextAction",
    "Outcome",
    "Reason",
    "RecordError",
    "RecoveryRecord",
    "Status",
    "Usage",
    "allowed_next_actions",
]


class Status(str, Enum):
    """How a run ended. Only ``completed`` means the application validated that the task is done."""

    COMPLETED = "completed"
    PARTIAL = "partial"
    STOPPED = "stopped"
    NEEDS_HUMAN = "needs_human"
    NEEDS_RECONCILIATION = "needs_reconciliation"

    def __str__(self) -> str:
        return self.value


class Reason(str, Enum):
    """Why a run ended. The first seventeen are the article prototype's; the rest come from the adapters, the store
    and the loop rules."""

    DEADLINE = "deadline"
    MODEL_BUDGET = "model_budget"
    INVALID_CALL = "invalid_call"
    MISSING_OPERATION_ID = "missing_operation_id"
    OPERATION_CONFLICT = "operation_conflict"
    UNKNOWN_COMMIT = "unknown_commit"
    SAME_CALL = "same_call"
    TOOL_BUDGET = "tool_budget"
    EXECUTOR_EXCEPTION = "executor_exception"
    INVALID_RESULT = "invalid_result"
    INVALID_EVIDENCE = "invalid_evidence"
    FATAL = "fatal"
    APPROVAL = "approval"
    VALIDATED_DONE = "validated_done"
    RETRY_AFTER_COMMIT = "retry_after_commit"
    NO_PROGRESS = "no_progress"
    PLAN_EXHAUSTED = "plan_exhausted"
    # adapters and the store
    MAX_TURNS = "max_turns"
    STOP_REQUESTED = "stop_requested"
    CANCELLED = "cancelled"
    COST_BUDGET = "cost_budget"
    WAIT_BUDGET = "wait_budget"
    CURSOR_CYCLE = "cursor_cycle"
    TRIGGER_CHAIN = "trigger_chain"
    UNVERIFIED_FINAL = "unverified_final"
    TOOL_TIMEOUT = "tool_timeout"
    GUARDRAIL = "guardrail"
    MODEL_BEHAVIOR = "model_behavior"
    MODEL_ERROR = "model_error"
    PERMISSION = "permission"
    TOKEN_BUDGET = "token_budget"
    TOOL_LIMIT = "tool_limit"
    TASK_FINISHED = "task_finished"
    """A reservation for a task another worker already ended (the worker then reports the stored outcome)."""
    CYCLE = "cycle"
    """A block of calls repeated without a new revision (A, B, A, B...), cut before it starts again."""
    ERROR_STORM = "error_storm"
    """One tool failing transiently again and again (``Policy.max_failures`` in its last ``failure_window`` runs)."""

    def __str__(self) -> str:
        return self.value


class NextAction(str, Enum):
    """What may be done after a terminal outcome."""

    RETURN_RESULT = "return_result"
    DELIVER_VERIFIED = "deliver_verified"
    BOUNDED_RETRY = "bounded_retry"
    QUERY_OPERATION_STATUS = "query_operation_status"
    HUMAN_REVIEW = "human_review"
    CLOSE = "close"

    def __str__(self) -> str:
        return self.value


_BUDGET_REASONS = frozenset(
    {
        Reason.DEADLINE,
        Reason.MODEL_BUDGET,
        Reason.TOOL_BUDGET,
        Reason.COST_BUDGET,
        Reason.TOKEN_BUDGET,
        Reason.TOOL_LIMIT,
        Reason.MAX_TURNS,
        Reason.WAIT_BUDGET,
    }
)
_TRANSIENT_REASONS = frozenset({Reason.EXECUTOR_EXCEPTION, Reason.TOOL_TIMEOUT, Reason.MODEL_ERROR, Reason.ERROR_STORM})
LOOP_REASONS = frozenset(
    {
        Reason.SAME_CALL,
        Reason.CYCLE,
        Reason.NO_PROGRESS,
        Reason.WAIT_BUDGET,
        Reason.CURSOR_CYCLE,
        Reason.ERROR_STORM,
    }
)
"""The loop rules' reasons: what shadow mode records instead of enforcing (every other reason is enforced)."""


def allowed_next_actions(status: Status, reason: Reason) -> list[NextAction]:
    """The next steps a status allows (the article's recovery table, in one place).

    complete -> return it; partial -> deliver what is verified; transient fault without effect (an error storm
    too: the retries within the run are spent, a later one may find the service back) -> bounded retry; unknown
    effect -> reconcile first; missing authorization -> a human, never a retry; no budget -> close; a loop (a repeated
    call, a cycle, no progress) -> deliver what is verified, a human reviews, or close.

    >>> [str(a) for a in allowed_next_actions(Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT)]
    ['query_operation_status', 'human_review']
    """
    A = NextAction
    if status is Status.COMPLETED:
        return [A.RETURN_RESULT]
    if status is Status.NEEDS_RECONCILIATION:
        return [A.QUERY_OPERATION_STATUS, A.HUMAN_REVIEW]
    if status is Status.NEEDS_HUMAN:
        return [A.HUMAN_REVIEW]
    if status is Status.PARTIAL:
        return [A.DELIVER_VERIFIED, A.HUMAN_REVIEW]
    if reason in _BUDGET_REASONS:
        return [A.DELIVER_VERIFIED, A.CLOSE]
    if reason in _TRANSIENT_REASONS:
        return [A.BOUNDED_RETRY, A.DELIVER_VERIFIED, A.CLOSE]
    return [A.DELIVER_VERIFIED, A.HUMAN_REVIEW, A.CLOSE]


@dataclass(frozen=True)
class Usage:
    """Counters consumed by a task: model attempts, tool executions, money and tokens."""

    models: int = 0
    """Model turns reserved (every attempt that left the process, retries included)."""
    tools: int = 0
    """Tool executions reserved (every attempt, including the ones that failed)."""
    cost: float = 0.0
    """Money reserved or settled, in the unit of the price table."""
    input_tokens: int = 0
    """Input tokens reserved or settled (estimates replaced by the reported usage)."""
    output_tokens: int = 0
    """Output tokens reserved or settled."""


@dataclass(frozen=True)
class Outcome:
    """The one explicit result of a guarded run.

    >>> o = Outcome(Status.STOPPED, Reason.SAME_CALL, task_id="t1", revision=2, used=Usage(models=3, tools=2))
    >>> o.record().allowed_next_actions
    ['deliver_verified', 'human_review', 'close']
    """

    status: Status
    reason: Reason
    task_id: str = ""
    revision: int = 0
    """The last revision the application validated."""
    value: Any = None
    """The last verified ok result (for ``completed``: the result that proved the task done)."""
    used: Usage = field(default_factory=Usage)
    operation_id: str | None = None
    """The write this outcome is about (the unknown one, for ``needs_reconciliation``)."""
    detail: str = ""
    """A human-readable explanation."""
    in_flight: tuple[str, ...] = ()
    """Calls that were still running when the run was cancelled or stopped."""
    pause_id: str | None = None
    """For ``needs_human``/``approval``: the stored pause to resume."""
    final_output: Any = None
    """The model's final answer, as stored (JSON, redacted): kept with the task, so a replay of a finished task
    still has it."""
    result: Any = field(default=None, compare=False, repr=False)
    """The adapter's own result object (for the Agents SDK: the RunResult or the exception's run data)."""
    secrets: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """The run's registered secrets, which :meth:`record` redacts wherever the record goes (a workflow's result, a
    framework's state, the command line)."""

    @property
    def done(self) -> bool:
        """True only for ``completed``."""
        return self.status is Status.COMPLETED

    def record(self, *, secrets: Iterable[str] = ()) -> RecoveryRecord:
        """The recovery record of this outcome; its ``validated_value`` is :attr:`value` redacted (with the run's
        :attr:`secrets` and ``secrets``, the application's own, see
        :func:`~agents_loopguard.values.canonical.redact`), so a rerun returns it."""
        secrets = (*self.secrets, *secrets)
        return RecoveryRecord(
            task_id=self.task_id,
            status=self.status,
            reason=self.reason,
            validated_revision=self.revision,
            validated_value=redact(self.value, secrets=secrets),
            used=RecordUsage(
                models=self.used.models,
                tools=self.used.tools,
                cost=self.used.cost,
                input_tokens=self.used.input_tokens,
                output_tokens=self.used.output_tokens,
            ),
            operation_id=self.operation_id,
            allowed_next_actions=[str(a) for a in allowed_next_actions(self.status, self.reason)],
            detail=self.detail,
            in_flight=list(self.in_flight),
            pause_id=self.pause_id,
            final_output=self.final_output,
        )


class RecordError(ValueError):
    """A stored recovery record is malformed or was tampered with."""


class RecordUsage(BaseModel):
    """The counters in a record; token counters appear only once a task used tokens (a token budget is set)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    models: int = Field(ge=0)
    tools: int = Field(ge=0)
    cost: float = Field(default=0.0, ge=0)
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in ("input_tokens", "output_tokens"):
            if not data.get(name):
                data.pop(name, None)
        return data


class RecoveryRecord(BaseModel):
    """What survives a terminal outcome: enough to decide the next step without re-running anything.

    >>> rec = RecoveryRecord.from_json(Outcome(Status.NEEDS_RECONCILIATION, Reason.UNKNOWN_COMMIT,
    ...     task_id="task-42", revision=3, used=Usage(4, 2), operation_id="order-42-confirm").record().to_json())
    >>> rec.allowed_next_actions
    ['query_operation_status', 'human_review']
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)
    task_id: str
    status: Status
    reason: Reason
    validated_revision: int = Field(ge=0)
    validated_value: Any = None
    """The last verified result (JSON, redacted): what ``deliver_verified`` delivers, and the value of a rerun."""
    used: RecordUsage
    operation_id: str | None = None
    allowed_next_actions: list[str]
    detail: str = ""
    in_flight: list[str] = Field(default_factory=list)
    pause_id: str | None = None
    final_output: Any = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (enums as their string values)."""
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        """The record as compact JSON."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False)

    @classmethod
    def from_json(cls, text: str | bytes | dict[str, Any]) -> RecoveryRecord:
        """Parse and validate a stored record; a malformed or inconsistent one raises :class:`RecordError`."""
        try:
            data = text if isinstance(text, dict) else json.loads(text)
            rec = cls.model_validate(data)
        except (ValidationError, ValueError, TypeError) as exc:
            raise RecordError(f"invalid recovery record: {exc}") from exc
        expected = [str(a) for a in allowed_next_actions(rec.status, rec.reason)]
        if rec.allowed_next_actions != expected:
            raise RecordError(
                f"recovery record's allowed_next_actions {rec.allowed_next_actions} do not follow from "
                f"{rec.status}/{rec.reason} (expected {expected}); the record was altered"
            )
        return rec

    def to_outcome(self) -> Outcome:
        """Rebuild the :class:`Outcome` (its value as stored; without the adapter's result, which records do not
        carry)."""
        return Outcome(
            status=self.status,
            reason=self.reason,
            task_id=self.task_id,
            revision=self.validated_revision,
            value=self.validated_value,
            used=Usage(
                self.used.models, self.used.tools, self.used.cost, self.used.input_tokens, self.used.output_tokens
            ),
            operation_id=self.operation_id,
            detail=self.detail,
            in_flight=tuple(self.in_flight),
            pause_id=self.pause_id,
            final_output=self.final_output,
        )
