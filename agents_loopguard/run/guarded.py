"""One guarded run, framework-neutral: every rule of a *run* lives here, once.

The engine (:class:`~agents_loopguard.Guard`) holds the rules of a *task*: reserve before every call, judge the
evidence, keep the ledger, end with one outcome. A run adds what happens between a model and its tools, and every
adapter needs the same answers:

* how a run starts (:meth:`GuardedRun.start`: the task's guard from one :class:`~agents_loopguard.RunOptions`, one
  error for a wrong mix, one check that every limit can be enforced);
* the ``tool_choice`` to send next (R12: a forced choice is released once no work remains);
* a model attempt reserved before it leaves (turn, worst-case cost) and settled after (real cost, trace);
* a proposal built from a tool name and the model's raw JSON (``invalid_call``, a write's ``operation_id`` and why
  it could not be derived), then authorize -> execute -> verify -> settle, with a tool's bounded retries;
* the calls in flight, and what a cancellation or a timeout makes of them;
* the refusal modes (``end``, ``continue``, ``raise``), the final-answer verdict, the model-error verdict, the pause;
  the model request itself (:mod:`.requests`) and how a run ends (:mod:`.conclusion`) build on this state.

The execution of a call is a generator of effects (:class:`Execute`, :class:`Check`, :class:`Sleep`): the adapter
performs them, synchronously (:func:`drive`) or on an event loop (:func:`adrive`), so sync and async runs share every
line of the rules. Adapters only translate: the Agents SDK adapter from its hooks, model wrapper and tool invoker;
the raw function-calling loop from Chat Completions and Responses payloads. Nothing here imports an SDK.

>>> from agents_loopguard import Budget, MemoryStore, RunOptions
>>> run = GuardedRun.start(RunOptions(budget=Budget(model_turns=3, tool_executions=2), store=MemoryStore()))
>>> attempt = run.begin_model_attempt("required")
>>> attempt.tool_choice
'required'
>>> spec = ToolSpec(verify=lambda args, out: {"revision": 1, "done": True, "effect": "none"})
>>> call = run.propose(spec, "lookup", '{"order": 42}', "c1")
>>> def perform(effect):
...     return "shipped" if isinstance(effect, Execute) else perform_check(effect)
>>> drive(run.execute(spec, call), perform).output
'shipped'
>>> run.begin_model_attempt("required").tool_choice    # done: nothing forces a tool any more
'none'
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engine.core import Guard, Observer
from ..engine.metering import NOTHING_RESERVED, Reserved
from ..store.defaults import default_store
from ..values.calls import KINDS, Call, Ticket, Verdict
from ..values.errors import LoopguardError
from ..values.evidence import UNVERIFIED, Effect, Evidence, VerifyFailed
from ..values.outcome import Outcome, Reason, Status
from .choices import forced_name, forces_tool
from .declarations import ToolSpec, Unnamed, Verify, declare_tool, parse_arguments
from .durable import recorded, replayed
from .effects import (
    Answer,
    Check,
    DeadlineExceeded,
    Execute,
    Sleep,
    adrive,
    drive,
    perform_check,
    perform_check_async,
    within_deadline,
)
from .model_errors import ModelFailure, classify_model_error
from .options import OnRefusal, Release, RunOptions
from .retry import NO_RETRY, RetryPolicy, ToolFailure

__all__ = [
    "Answer",
    "Check",
    "DeadlineExceeded",
    "Execute",
    "Executed",
    "GuardStopped",
    "GuardedRun",
    "ModelAttempt",
    "OnRefusal",
    "Release",
    "Sleep",
    "ToolSpec",
    "Verify",
    "adrive",
    "declare_tool",
    "drive",
    "forced_name",
    "forces_tool",
    "perform_check",
    "perform_check_async",
    "within_deadline",
]

_CONTINUABLE = frozenset(
    {
        Reason.SAME_CALL,
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
    Reason.TOOL_BUDGET: "no tool executions are left for this task; answer with what you have",
    Reason.INVALID_CALL: "the call is not valid; fix the arguments",
    Reason.MISSING_OPERATION_ID: "the arguments do not name the business operation this write performs",
    Reason.OPERATION_CONFLICT: "this operation id was already used with other arguments",
    Reason.WAIT_BUDGET: "the job has been polled as long as allowed",
    Reason.UNKNOWN_COMMIT: "the result of this write is unknown; it will not be sent again until reconciled",
}
_AFTER_DONE = "not executed: the application already validated the task as done; give your final answer"


class GuardStopped(LoopguardError):
    """Raised by an entry point with ``on_refusal="raise"`` when the guard stopped the run; ``.outcome`` is the
    (stored, sticky) outcome."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(f"the guard stopped task {outcome.task_id}: {outcome.status}/{outcome.reason}")
        self.outcome = outcome


def _guard_of(options: RunOptions) -> Guard:
    """The task's guard: ``guard=`` as given, or a new one for ``budget=`` (with ``store=``, ``task_id=``,
    ``policy=``, ``secrets=``, ``prices=``). There is no unlimited default, and the two ways do not mix. Without
    ``store=`` the task lives in the default persistent store, the one ``loopguard`` reads."""
    if options.guard is not None:
        mixed = [name for name in ("budget", "store", "task_id", "policy") if getattr(options, name) is not None]
        if mixed or options.secrets:
            listed = ", ".join(f"{name}=" for name in mixed or ["secrets"])
            raise ValueError(f"pass either guard= or budget= (with store=, task_id=, policy=), not both ({listed})")
        if options.prices is not None and options.guard.prices is None:
            options.guard.prices = options.prices
        return options.guard
    if options.budget is None:
        raise ValueError(
            "a guarded run needs guard= or budget=Budget(model_turns=..., tool_executions=...): "
            "there is no unlimited default"
        )
    return Guard(
        budget=options.budget,
        store=options.store if options.store is not None else default_store(),
        task_id=options.task_id,
        policy=options.policy,
        secrets=options.secrets,
        prices=options.prices,
    )


# --- one run -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelAttempt:
    """A model attempt reserved by :meth:`GuardedRun.begin_model_attempt`: send it with this ``tool_choice``."""

    tool_choice: Any
    reserved: Reserved = NOTHING_RESERVED
    """Its worst-case cost and tokens, settled with the usage."""
    timeout: float | None = None
    """Seconds left before the task's deadline: the request must not outlive it (``None``: no deadline)."""


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
class GuardedRun:
    """The state of one guarded run and every run-level rule. Adapters drive it; it decides.

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
    _done_turn: int = 0
    _keys: itertools.count[int] = field(default_factory=itertools.count)

    @classmethod
    def start(
        cls,
        options: RunOptions,
        *,
        observer: Observer | None = None,
        unwrap_values: bool = True,
        label: Callable[[Call], str] = call_label,
        raises: Callable[[Outcome], Exception] = GuardStopped,
        reset_forced_function: bool = False,
    ) -> GuardedRun:
        """The only door of a run: the task's guard from ``options`` (``guard=``, or a new one for ``budget=``),
        checked once (a cost budget needs ``prices=``). An adapter says how it shows decisions (``observer``: the
        guard's observer when it has none), values (``unwrap_values``: the tool output rather than the engine's
        result ``{"status": ..., "output": ...}``) and calls in flight (``label``), what ``on_refusal="raise"``
        raises (its framework's subclass of :class:`GuardStopped`), and whether a forced function that ran is
        sent as ``auto`` afterwards (``reset_forced_function``).

        >>> from agents_loopguard import Budget, MemoryStore, RunOptions
        >>> run = GuardedRun.start(RunOptions(budget=Budget(4, 2), store=MemoryStore(), task_id="t-start"))
        >>> run.guard.task_id, run.on_refusal
        ('t-start', 'end')
        >>> GuardedRun.start(RunOptions())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: a guarded run needs guard= or budget=Budget(...): there is no unlimited default
        """
        guard = _guard_of(options)
        guard.check_prices()
        if guard.observer is None and observer is not None:
            guard.observer = observer
        return cls(
            guard,
            options,
            reset_forced_function=reset_forced_function,
            unwrap_values=unwrap_values,
            label=label,
            raises=raises,
        )

    @property
    def on_refusal(self) -> OnRefusal:
        """What a refused call does to this run (``RunOptions.on_refusal``)."""
        return self.options.on_refusal

    @property
    def release(self) -> Release:
        """What replaces a forced ``tool_choice`` once no work remains (``RunOptions.release_tool_choice``)."""
        return self.options.release_tool_choice

    def check_enforceable(self, model: str | None, max_output_tokens: int | None, *, where: str = "") -> None:
        """Refuse (``ValueError``) before anything runs a request shape whose limits the task could not enforce
        (no output bound with a cost budget or an output/total token limit; no price for ``model`` with a cost
        budget): the one check of every adapter; ``where`` names the request's origin (an agent)."""
        try:
            self.guard.check_request(model, max_output_tokens)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}" if where else str(exc)) from None

    # --- decisions the run remembers -----------------------------------------------------------------------

    def stop(self, verdict: Verdict) -> Verdict:
        """Remember ``verdict`` as the end of this run (the first one wins)."""
        if self.verdict is None:
            self.verdict = verdict
        return self.verdict

    def report(self, verdict: Verdict) -> str:
        """Apply the refusal mode to a verdict about one call; return what the model reads."""
        if self.on_refusal == "continue" and verdict.status is Status.STOPPED and verdict.reason in _CONTINUABLE:
            self.told.append(verdict)
        else:
            self.stop(verdict)
        return refusal_message(verdict)

    def no_work_remains(self) -> bool:
        """Validated done, or no tool execution left, or no later model turn to read a tool's result."""
        used, budget = self.guard.used, self.guard.budget
        return self.done is not None or used.tools >= budget.tool_executions or used.models >= budget.model_turns

    def tool_choice(self, requested: Any) -> Any:
        """The ``tool_choice`` to send with a request that offers tools (R12): once no work remains, whatever was
        asked becomes ``release`` (``"none"`` by default: the model answers; a requested ``"none"`` stays); while
        work remains, a forced function that already ran is sent as ``"auto"`` when ``reset_forced_function``.

        >>> from agents_loopguard import Budget, MemoryStore, RunOptions
        >>> run = GuardedRun.start(RunOptions(budget=Budget(model_turns=5, tool_executions=0), store=MemoryStore()))
        >>> run.tool_choice("required"), run.tool_choice("auto"), run.tool_choice(None)
        ('none', 'none', 'none')
        """
        if self.no_work_remains():
            return "none" if requested == "none" else self.release
        name = forced_name(requested)
        if self.reset_forced_function and name is not None and name in self.ran:
            return "auto"
        return requested

    # --- model attempts --------------------------------------------------------------------------------------

    def begin_model_step(self) -> None:
        """A model request begins: inside a durable engine's step, the step is recorded (a step the engine
        re-executes after a crash is the same request's attempt again, counted once more as it is sent again)."""
        durable = self.options.durable
        key = durable.model_step() if durable is not None else None
        if key is not None:
            self.guard.begin_step(key)

    def begin_model_attempt(
        self,
        requested_choice: Any = None,
        *,
        offers_tools: bool = True,
        model: str | None = None,
        request: Callable[[], Mapping[str, Any]] | None = None,
        max_output_tokens: int | None = None,
    ) -> ModelAttempt | Verdict:
        """Reserve one model attempt before it is sent: its worst-case cost (with a cost budget) and tokens (with
        token limits), then the turn (the deadline, the stop mark and the model budget are checked there). A refusal
        ends the run: the verdict is returned (and remembered); the attempt must not be sent.

        ``offers_tools``: the request offers tools (its ``tool_choice`` is the guard's then, see
        :meth:`tool_choice`). ``model`` names the model for its price. ``request`` gives what the request is made
        of, for :attr:`estimate_input_tokens` (called only when something is reserved); ``max_output_tokens`` bounds
        its output.
        """
        self.drain_interrupted()
        if self.verdict is not None:
            return self.verdict
        estimate = None if request is None else lambda: self.options.estimate_input_tokens(request())
        reserved = self.guard.reserve_request(model, estimate, max_output_tokens)
        if isinstance(reserved, Verdict):
            return self.stop(reserved)
        refused = self.guard.begin_turn()
        if refused is not None:
            self.guard.settle_request(reserved, billed=False)  # never sent: nothing used
            return self.stop(refused)
        choice = self.tool_choice(requested_choice) if offers_tools else requested_choice
        return ModelAttempt(choice, reserved, self.remaining())

    def end_model_attempt(
        self, attempt: ModelAttempt, *, usage: tuple[int, int] | None = None, failure: ModelFailure | None = None
    ) -> None:
        """Settle a sent attempt: its real cost and tokens (the reported usage; an error response costs nothing, a
        timeout keeps its worst case) and a model entry in the task's timeline."""
        self.guard.settle_request(attempt.reserved, usage=usage, billed=failure.billed if failure is not None else None)
        self.guard.record_model_answer("answered" if failure is None else f"error:{failure.label}")

    def remaining(self) -> float | None:
        """Seconds left before the task's deadline (``None`` without one): what work in flight may still take."""
        deadline = self.guard.budget.deadline
        return None if deadline is None else max(0.0, deadline - self.guard.now())

    def deadline_verdict(self, what: str) -> Verdict:
        """The verdict when ``what`` (a model request) was still running at the deadline."""
        return self.stop(Verdict(Status.STOPPED, Reason.DEADLINE, f"the deadline passed during {what}"))

    def model_error(self, failure: ModelFailure, *, attempts: int | None = None) -> Verdict:
        """The verdict of a model request that failed for good (after the retries that were allowed)."""
        detail = str(self.guard.storable(failure.detail))
        if failure.kind == "permission":
            return Verdict(Status.NEEDS_HUMAN, Reason.PERMISSION, f"{detail}: not retried, a human must act")
        if failure.kind == "fatal":
            return Verdict(Status.STOPPED, Reason.FATAL, f"{detail}: the API refused the request")
        if not failure.may_retry:
            return Verdict(Status.STOPPED, Reason.MODEL_ERROR, f"{detail}: the server says not to retry")
        suffix = f" (after {attempts} attempts)" if attempts is not None else ""
        return Verdict(Status.STOPPED, Reason.MODEL_ERROR, f"{detail}{suffix}")

    def model_retry(self, failure: ModelFailure, *, retry: int, policy: RetryPolicy) -> float | Verdict:
        """After the failed attempt number ``retry + 1`` of one model request: the seconds to wait before the next
        attempt (which is reserved like any), or the verdict that ends the request (not retryable, no retry left,
        a server asking to wait too long, a wait that would pass the deadline)."""
        if failure.kind != "transient" or not failure.may_retry:
            return self.model_error(failure)
        if retry >= policy.max_retries:
            return self.model_error(failure, attempts=retry + 1)
        delay = policy.delay(retry, retry_after=failure.retry_after)
        if delay is None:
            detail = f"{self.guard.storable(failure.detail)}: the server asks to wait {failure.retry_after}s"
            return Verdict(Status.STOPPED, Reason.MODEL_ERROR, f"{detail}, more than max_retry_after")
        return self.wait_verdict(delay) or delay

    def failed_attempt(
        self, attempt: ModelAttempt, error: Exception, *, retry: int, policy: RetryPolicy | None
    ) -> float | Verdict | None:
        """Settle the failed attempt number ``retry + 1`` of one model request and decide: the seconds to wait
        before the next attempt, the verdict that ends the request (remembered for ``error``: the conclusion finds
        it when the framework re-raises it; the deadline also ends the run), or ``None`` when ``error`` is not an
        API error (a programming error, or the framework's own: the conclusion decides). ``policy=None``: the
        attempt may not be retried (a stream that already delivered events)."""
        failure = classify_model_error(error) if not isinstance(error, DeadlineExceeded) else None
        if failure is None:
            name = type(error).__name__
            self.end_model_attempt(attempt, failure=ModelFailure("fatal", False, None, True, name, f"{name}: {error}"))
            if isinstance(error, DeadlineExceeded):
                return self.deadline_verdict("a model request")
            return None
        self.end_model_attempt(attempt, failure=failure)
        wait = self.model_retry(failure, retry=retry, policy=policy or NO_RETRY)
        if isinstance(wait, Verdict):
            if wait.reason is Reason.DEADLINE:
                self.stop(wait)
            self.failures[id(error)] = (error, wait)
        return wait

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

    def wait_verdict(self, seconds: float) -> Verdict | None:
        """A retry backoff that would end past the deadline is not started: the deadline verdict."""
        deadline = self.guard.budget.deadline
        if deadline is not None and self.guard.now() + seconds >= deadline:
            return Verdict(Status.STOPPED, Reason.DEADLINE, f"a retry in {seconds:.3g}s would start past the deadline")
        return None

    def checkpoint(self) -> Verdict | None:
        """Before a handoff, a sub-agent or a pending job: the run's own end, or the task's stop mark."""
        if self.verdict is not None:
            return self.verdict
        stopped = self.guard.check_stop()
        return self.stop(stopped) if stopped is not None else None

    # --- one tool call -----------------------------------------------------------------------------------------

    def refuse_invalid(self, tool: str, kind: str, detail: str) -> Executed:
        """Refuse a call that is not a valid call of an offered tool, through the engine's own validation (traced
        and ended like any invalid proposal; nothing is reserved)."""
        if (skipped := self._skipped()) is not None:
            return skipped
        verdict = self.guard.authorize({"tool": tool, "kind": kind if kind in KINDS else "read", "args": None})
        assert isinstance(verdict, Verdict), "a call without arguments is never authorized"
        if verdict.reason is Reason.INVALID_CALL:
            verdict = dataclasses.replace(verdict, detail=detail)
        return self._refused(verdict)

    def _refused(self, verdict: Verdict) -> Executed:
        return Executed(message=self.report(verdict), verdict=verdict)

    def propose(
        self,
        spec: ToolSpec,
        tool: str,
        arguments: str | Mapping[str, Any] | None,
        call_id: str | None = None,
        *,
        check: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> Call | Executed:
        """The engine's view of a proposed call: the arguments parsed (a JSON object, which ``check`` may refuse
        further) and a write's operation id derived from them. Returns what the model reads instead when the
        call cannot be made, or when the run already ended or the task is validated done (nothing is parsed then)."""
        args = self.parse(spec, tool, arguments)
        if isinstance(args, Executed):
            return args
        problem = check(args) if check is not None else None
        if problem is not None:
            return self.refuse_invalid(tool, spec.kind, problem)
        limit = spec.max_executions
        named = spec.operation_of(args)
        if named is None:
            return Call(tool, args, spec.kind, None, call_id, limit)
        if isinstance(named, Unnamed):
            return self._no_operation(Call(tool, args, "write", None, call_id, limit), named.why)
        return Call(tool, args, "write", named, call_id, limit)

    def parse(self, spec: ToolSpec, tool: str, arguments: str | Mapping[str, Any] | None) -> dict[str, Any] | Executed:
        """The model's arguments as a dict, or the refusal the model reads (``invalid_call``); nothing is parsed
        once the run ended or the task is validated done."""
        if (skipped := self._skipped()) is not None:
            return skipped
        args = parse_arguments(tool, arguments)
        return self.refuse_invalid(tool, spec.kind, args) if isinstance(args, str) else args

    def _no_operation(self, call: Call, why: str) -> Executed:
        verdict = self.guard.authorize(call)
        assert isinstance(verdict, Verdict), "a write without an operation id is never authorized"
        if verdict.reason is Reason.MISSING_OPERATION_ID:
            detail = f"{call.tool}: operation_id(args) could not name the operation: {why}"
            verdict = dataclasses.replace(verdict, detail=str(self.guard.storable(detail)))
        return self._refused(verdict)

    def _skipped(self) -> Executed | None:
        """A call proposed after the run's end, or after the task was validated done, is never executed."""
        if self.verdict is not None:
            message = f"not executed: the run ended before this call ({self.verdict.reason})"
            return Executed(message=message, verdict=self.verdict)
        if self.done is not None:
            if self.guard.used.models > self._done_turn:  # asked for an answer after done, it called a tool again
                self.stop(self.done)
            return Executed(message=_AFTER_DONE, verdict=self.done)
        return None

    def execute(self, spec: ToolSpec, call: Call) -> Generator[Any, Answer, Executed]:
        """``authorize -> Execute -> Check -> settle`` for one call, with the tool's bounded retries; a generator of
        effects for :func:`drive` / :func:`adrive`. A refused call never executes; a committed write returns its
        stored output without executing. Inside a durable engine's workflow (``RunOptions.durable``), an execution
        the engine's replay runs again returns what the model read the first time, reserving nothing (R17)."""
        durable = self.options.durable
        key = durable.tool_step(call.call_id) if durable is not None else None
        if key is None:
            return (yield from self._execute(spec, call))
        step = self.guard.begin_step(key)
        if step.done:
            return self._replayed(step.output)
        before, executed = self.done, (yield from self._execute(spec, call))
        if executed.error is None:  # a body's exception is the framework's to report: run again on a replay
            ended, proved = self.verdict is executed.verdict, self.done if self.done is not before else None
            self.guard.end_step(key, recorded(executed.output, executed.message, executed.verdict, ended, proved))
        return executed

    def _replayed(self, record: Any) -> Executed:
        """A recorded execution, replayed: what the model read, and the run's state as the execution left it."""
        output, message, verdict, ended, done = replayed(record)
        if done is not None and self.done is None:
            self.done, self._done_turn = done, self.guard.used.models
        if verdict is not None and ended:
            self.stop(verdict)
        elif verdict is not None and verdict.status is not Status.COMPLETED and verdict not in self.told:
            self.told.append(verdict)
        return Executed(output=output, message=message, verdict=verdict)

    def _execute(self, spec: ToolSpec, call: Call) -> Generator[Any, Answer, Executed]:
        if (skipped := self._skipped()) is not None:
            return skipped
        ticket = self.guard.authorize(call)
        attempt = 1
        while True:
            if isinstance(ticket, Verdict):
                return self._refused(ticket)
            outcome = yield from self._attempt(spec, ticket, attempt)
            if isinstance(outcome, Executed):
                return outcome
            failure = outcome
            if attempt > spec.retry.max_retries:
                note = f"{self.guard.storable(str(failure))} ({attempt} attempts; verified to have had no effect)"
                return Executed(message=f"error: {note}")
            stop = self.wait_verdict(delay := spec.retry.delay(attempt - 1) or 0.0)
            if stop is not None:
                return self._refused(stop)
            if delay > 0:
                yield Sleep(delay)
            attempt += 1
            ticket = self.guard.authorize(call, retry_of=ticket)

    def _attempt(self, spec: ToolSpec, ticket: Ticket, attempt: int) -> Generator[Any, Answer, Executed | ToolFailure]:
        """One authorized attempt: its result, or the transient failure (verified without effect) to retry."""
        failure: ToolFailure | None = None
        if ticket.replay:  # a committed write: its stored result, never a second execution
            output = _output_of(ticket.result)
            evidence = yield from self._evidence(spec, ticket, output)
        else:
            key = next(self._keys)
            flight = self.flights[key] = Flight(ticket, self.label(ticket.call))
            try:
                answer = yield Execute(ticket.call, attempt, self.remaining())
                if isinstance(answer.error, DeadlineExceeded):
                    return self._failed(ticket, answer.error, reason=Reason.DEADLINE)
                if answer.error is not None:
                    kind = spec.retry.classify(answer.error)
                    if kind is None:
                        return self._failed(ticket, answer.error)
                    failure = ToolFailure(answer.error, kind, attempt)
                output = failure if failure is not None else answer.value
                evidence = yield from self._evidence(spec, ticket, output, failed=failure is not None)
            except BaseException:
                self.interrupted.append(flight)  # executed, not verified: still in flight
                raise
            finally:
                self.flights.pop(key, None)
        verdict = self.guard.settle(ticket, self._result(output, failure), evidence=evidence)
        if verdict is not None:
            if failure is not None and failure.kind == "permission" and verdict.reason is Reason.APPROVAL:
                detail = f"{ticket.call.tool}: {self.guard.storable(str(failure))}: a permission error is never retried"
                verdict = dataclasses.replace(verdict, reason=Reason.PERMISSION, detail=detail)
            return self._settled(verdict, output, ran=failure is None)
        if failure is None:
            self.ran.add(ticket.call.tool)
            return Executed(output=output)
        return failure

    def _failed(self, ticket: Ticket, error: Exception, *, reason: Reason = Reason.EXECUTOR_EXCEPTION) -> Executed:
        failed = self.guard.fail(ticket, error, reason=reason)
        self.failures[id(error)] = (error, failed)
        return Executed(message=self.report(failed), error=error, verdict=failed)

    def _settled(self, verdict: Verdict, output: Any, *, ran: bool) -> Executed:
        if verdict.status is Status.COMPLETED:
            if self.done is None:
                self.done = verdict
                self._done_turn = self.guard.used.models
            return Executed(output=output)
        self.stop(verdict)  # progress rules and unknown effects end the run in every mode
        return Executed(output=output) if ran else Executed(message=refusal_message(verdict), verdict=verdict)

    def _result(self, output: Any, failure: ToolFailure | None) -> dict[str, Any]:
        if failure is None:
            return {"status": "ok", "output": jsonable(output)}
        status = "retryable" if failure.kind == "transient" else "needs_human"
        return {"status": status, "error": self.guard.storable(str(failure))}

    def _evidence(
        self, spec: ToolSpec, ticket: Ticket, output: Any, *, failed: bool = False
    ) -> Generator[Any, Answer, Any]:
        """The evidence of one attempt: the application's verify (a :class:`Check` effect), or, without one (or
        for a failed read), evidence that proves no progress."""
        if failed and spec.kind != "write":  # a failed read changed nothing, verified by the failure itself
            return Evidence(revision=ticket.revision, done=False, effect=Effect.NONE)
        if spec.verify is None:
            return UNVERIFIED
        answer = yield Check(spec.verify, (dict(ticket.call.args), output))
        return VerifyFailed(answer.error) if answer.error is not None else answer.value

    # --- interruptions and the end ------------------------------------------------------------------------------

    def drain_interrupted(self, reason: Reason = Reason.TOOL_TIMEOUT) -> None:
        """Executions cancelled while the run went on were tool timeouts: the engine decides what they mean."""
        while self.interrupted:
            flight = self.interrupted.pop(0)
            self.report(self.guard.fail(flight.ticket, TimeoutError("the tool timed out"), reason=reason))

    def timed_out(self, tool: str, error: BaseException) -> Verdict:
        """The framework reported a tool timeout as an error: the interrupted call of ``tool`` fails with it."""
        flight = next((f for f in self.interrupted if f.ticket.call.tool == tool), None)
        if flight is None:
            return Verdict(Status.STOPPED, Reason.TOOL_TIMEOUT, f"{type(error).__name__}: {error}")
        self.interrupted.remove(flight)
        return self.guard.fail(flight.ticket, error, reason=Reason.TOOL_TIMEOUT)


def jsonable(value: Any) -> Any:
    """A tool output in a form the ledger can store (pydantic models and dataclasses become dicts)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _output_of(result: Any) -> Any:
    """The tool output inside an engine result ``{"status": ..., "output": ...}``."""
    if isinstance(result, Mapping) and set(result) == {"status", "output"}:
        return result["output"]
    return result
