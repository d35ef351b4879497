"""The state of one guarded run and the decisions its parts share: the verdict that ends it, the refusal mode, what
the model reads instead of a refused call, the deadline's remaining time, the stop mark at a checkpoint.

:class:`~agents_loopguard.run.guarded.GuardedRun` (model attempts, the run's start) and
:class:`~agents_loopguard.run.tool_calls.ToolCalls` (one tool call) build on it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine.core import Guard
from ..values.calls import Call, Ticket, Verdict
from ..values.errors import LoopguardError
from ..values.outcome import Outcome, Reason, Status
from .options import OnRefusal, Release, RunOptions
from .telemetry import Telemetry

__all__ = ["Executed", "Flight", "GuardStopped", "RunState", "UnguardedTool", "call_label", "refusal_message"]

_CONTINUABLE = frozenset(
    {
        Reason.SAME_CALL,
        Reason.CYCLE,
        Reason.INVALID_CALL,
        Reason.MISSING_OPERATION_ID,
        Reason.OPERATION_CONFLICT,
        Reason.TOOL_BUDGET,
        Reason.WAIT_BUDGET,
        Reason.EXECUTOR_EXCEPTION,
        Reason.TOOL_TIMEOUT,
    }
)
"""Verdicts about one call that ``on_refusal="continue"`` reports to the model instead of ending the run. Only with
status ``stopped``: an unknown write (needs_reconciliation) or a needed human always ends the run, and so do the
task-wide stops (stop mark, deadline, model budget) and the progress rules (no_progress, cursor_cycle...)."""

_HINTS: dict[Reason, str] = {
    Reason.SAME_CALL: "this exact call already ran as often as allowed without new progress; it will not run again",
    Reason.CYCLE: "these calls already ran in this order without new progress; this one will not run again now",
    Reason.TOOL_BUDGET: "no tool executions are left for this task; answer with what you have",
    Reason.INVALID_CALL: "the call is not valid; fix the arguments",
    Reason.MISSING_OPERATION_ID: "the arguments do not name the business operation this write performs",
    Reason.OPERATION_CONFLICT: "this operation id was already used with other arguments",
    Reason.WAIT_BUDGET: "the job has been polled as long as allowed",
    Reason.UNKNOWN_COMMIT: "the result of this write is unknown; it will not be sent again until reconciled",
}


class GuardStopped(LoopguardError):
    """Raised by an entry point with ``on_refusal="raise"`` when the guard stopped the run; ``.outcome`` is the
    (stored, sticky) outcome."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(f"the guard stopped task {outcome.task_id}: {outcome.status}/{outcome.reason}")
        self.outcome = outcome


class UnguardedTool(LoopguardError, ValueError):
    """A tool whose body the adapter cannot reach (a hosted tool, a tool type it does not know), refused when the
    run starts; the message names the fix and the opt-out (``RunOptions.unguarded``)."""


@dataclass(frozen=True)
class Executed:
    """What one proposed call came to."""

    output: Any = None
    """The tool output (or the stored output of a committed write) when ``message`` is None."""
    message: str | None = None
    """What the model reads instead of an output: the call was refused, skipped, or failed."""
    error: Exception | None = None
    """The body's own exception (the Agents SDK re-raises it, so the tool's failure policy decides the text)."""
    verdict: Verdict | None = None
    """The refusal, failure or end behind ``message``."""


@dataclass
class Flight:
    """One execution between its reservation and its verified result."""

    ticket: Ticket
    label: str


def call_label(call: Call) -> str:
    """How a call in flight is named in an outcome: ``tool[call_id]``, with a write's operation id."""
    label = f"{call.tool}[{call.call_id or '?'}]"
    return f"{label} operation {call.operation_id}" if call.kind == "write" and call.operation_id else label


def refusal_message(verdict: Verdict) -> str:
    """What the model reads instead of a tool output when the guard refuses or stops a call."""
    hint = _HINTS.get(verdict.reason, "the guard stopped this call")
    detail = f" ({verdict.detail})" if verdict.detail else ""
    return f"refused: {verdict.status}/{verdict.reason}: {hint}{detail}"


@dataclass(eq=False)
class RunState:
    """The state of one guarded run and the decisions every part of it shares (:class:`GuardedRun` adds the
    model attempts, :class:`~agents_loopguard.run.tool_calls.ToolCalls` one tool call). Adapters drive it; it decides.

    ``prices``: the price table for the cost budget (a request's model is priced with
    :func:`~agents_loopguard.values.pricing.price_for`). ``unwrap_values``: the outcome's value is the tool output (the
    Agents SDK) rather than the engine's result ``{"status": ..., "output": ...}`` (the raw loop, like
    :func:`~agents_loopguard.create_runner`).
    ``label``: how a call in flight is named in ``Outcome.in_flight``.
    ``reset_forced_function``: a forced function that ran is sent as ``auto`` afterwards (the raw loop; the Agents
    SDK applies its own ``reset_tool_choice`` before the guard sees the settings).
    """

    guard: Guard
    options: RunOptions = field(default_factory=RunOptions)
    """What the run was told (its refusal mode, ``verify_output``, the input estimator, the pause handler...)."""
    reset_forced_function: bool = False
    unwrap_values: bool = True
    label: Callable[[Call], str] = call_label
    raises: Callable[[Outcome], Exception] = GuardStopped
    """What ``on_refusal="raise"`` raises (an adapter passes its framework's subclass of :class:`GuardStopped`)."""
    verdict: Verdict | None = None
    """The verdict that ends this run (first wins). Checked at every checkpoint."""
    done: Verdict | None = None
    """Set when a tool's verified evidence says the task is done; the run waits for the model's final answer."""
    told: list[Verdict] = field(default_factory=list)
    """Refusals and failures reported to the model while the run continued (``on_refusal="continue"``)."""
    ran: set[str] = field(default_factory=set)
    """Tools whose call settled successfully (a forced function that ran is no longer forced)."""
    flights: dict[int, Flight] = field(default_factory=dict)
    interrupted: list[Flight] = field(default_factory=list)
    """Executions whose task was cancelled before a verified result: a tool timeout, or the run's cancellation."""
    failures: dict[int, tuple[BaseException, Verdict]] = field(default_factory=dict)
    """id(exception) -> (the exception, kept alive so its id stays its own; its verdict): a tool or model failure
    the guard recorded before the framework re-raised it (see :meth:`recorded_failure`)."""
    cancel_requested: bool = False
    telemetry: Telemetry | None = None
    """What the run tells an observability backend (:mod:`~agents_loopguard.run.telemetry`; None: nothing)."""
    failures_given_back: bool = False
    """A tool body's exception goes back to the framework, whose retry layers between the guard and the body may run
    the body again (each run a new proposal: reserved, a write with an unknown result refused): the failure is
    recorded at once and reported (ending the run per ``on_refusal``) only when it stands
    (:meth:`~agents_loopguard.run.tool_calls.ToolCalls.failure_stands`)."""
    outside: set[str] = field(default_factory=set)
    """Tools this run admitted outside the guard (``RunOptions.unguarded``), each recorded once."""
    _done_turn: int = 0
    _keys: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def on_refusal(self) -> OnRefusal:
        """What a refused call does to this run (``RunOptions.on_refusal``)."""
        return self.options.on_refusal

    @property
    def release(self) -> Release:
        """What replaces a forced ``tool_choice`` once no work remains (``RunOptions.release_tool_choice``)."""
        return self.options.release_tool_choice

    def stop(self, verdict: Verdict) -> Verdict:
        """Remember ``verdict`` as the end of this run (the first one wins)."""
        if self.verdict is None:
            self.verdict = verdict
        return self.verdict

    def refuse_door(self, detail: str) -> Verdict:
        """A path the adapter cannot guard was taken: the run ends ``stopped/fatal`` with the fix in ``detail``
        (fail closed), nothing more runs."""
        return self.stop(Verdict(Status.STOPPED, Reason.FATAL, detail))

    def report(self, verdict: Verdict) -> str:
        """Apply the refusal mode to a verdict about one call; return what the model reads."""
        if self.on_refusal == "continue" and verdict.status is Status.STOPPED and verdict.reason in _CONTINUABLE:
            self.told.append(verdict)
        else:
            self.stop(verdict)
        return refusal_message(verdict)

    def no_work_remains(self, *, ahead: int = 0) -> bool:
        """Validated done, or no tool execution left, or no later model turn to read a tool's result (``ahead``:
        turns about to be reserved, for a choice made before its request is reserved)."""
        used, budget = self.guard.used, self.guard.budget
        return (
            self.done is not None or used.tools >= budget.tool_executions or used.models + ahead >= budget.model_turns
        )

    def spent(self, verdict: Verdict | None) -> bool:
        """True when ``verdict`` refused a call because the task's tool budget is spent (not one tool's own
        limit): no later call of any run can execute, so a client that makes one call per run (the MCP proxy)
        ends the task with it rather than leave it running."""
        used, budget = self.guard.used, self.guard.budget
        return verdict is not None and verdict.reason is Reason.TOOL_BUDGET and used.tools >= budget.tool_executions

    def remaining(self) -> float | None:
        """Seconds left before the task's deadline (``None`` without one): what work in flight may still take."""
        deadline = self.guard.budget.deadline
        return None if deadline is None else max(0.0, deadline - self.guard.now())

    def wait_verdict(self, seconds: float) -> Verdict | None:
        """A retry backoff that would end past the deadline is not started: the deadline verdict."""
        deadline = self.guard.budget.deadline
        if deadline is not None and self.guard.now() + seconds >= deadline:
            return Verdict(Status.STOPPED, Reason.DEADLINE, f"a retry in {seconds:.3g}s would start past the deadline")
        return None

    def admit(self, tool: str, what: str, fix: str) -> None:
        """A tool whose body the adapter cannot reach (``what`` says what it is): refused with
        :class:`UnguardedTool` naming ``fix``, unless ``RunOptions.unguarded`` opts it out (then recorded in the
        task's trace, once per run). Adapters call it for every such tool before anything runs (and before a
        request that offers one that appeared at run time).

        >>> from agents_loopguard import Budget, MemoryStore, RunOptions
        >>> from agents_loopguard.run import GuardedRun
        >>> run = GuardedRun.start(RunOptions(budget=Budget(1, 1), store=MemoryStore()))
        >>> run.admit("web_search", "a hosted tool", "do the search in a function tool")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        agents_loopguard.run.state.UnguardedTool: tool 'web_search' is a hosted tool: the guard cannot reserve ...
        """
        why = self.options.unguarded.get(tool)
        if why is None:
            raise UnguardedTool(
                f"tool {tool!r} is {what}: the guard cannot reserve its body, so the run is refused. {fix}; or run "
                f'it outside the guard on purpose: unguarded={{{tool!r}: "why"}} (recorded in the task\'s trace)'
            )
        if tool not in self.outside:
            self.outside.add(tool)
            self.guard.record_unguarded(tool, f"{what}: {why}")

    def checkpoint(self) -> Verdict | None:
        """Before a handoff, a sub-agent or a pending job: the run's own end, or the task's stop mark."""
        if self.verdict is not None:
            return self.verdict
        stopped = self.guard.check_stop()
        return self.stop(stopped) if stopped is not None else None

    def recorded_failure(self, error: BaseException) -> Verdict | None:
        """The verdict the guard recorded for ``error`` or for an exception in its chain of causes (a tool's or a
        model request's failure, re-raised by the framework), or ``None``."""
        seen: set[int] = set()
        current: BaseException | None = error
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            recorded = self.failures.get(id(current))
            if recorded is not None and recorded[0] is current:
                return recorded[1]
            current = current.__cause__ or current.__context__
        return None
