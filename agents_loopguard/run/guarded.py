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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.core import Guard, Observer
from ..engine.metering import NOTHING_RESERVED, Reserved
from ..store.defaults import default_store
from ..values.calls import Call, Verdict
from ..values.outcome import Outcome, Reason, Status
from .choices import forced_name, forces_tool
from .declarations import ToolSpec, Verify, check_declarations, check_unguarded, declare_tool
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
from .retry import NO_RETRY, RetryPolicy
from .state import Executed, GuardStopped, UnguardedTool, call_label, refusal_message
from .telemetry import Telemetry, telemetry_for_run
from .tool_calls import ToolCalls, jsonable

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
    "UnguardedTool",
    "Verify",
    "adrive",
    "call_label",
    "declare_tool",
    "drive",
    "forced_name",
    "forces_tool",
    "jsonable",
    "perform_check",
    "perform_check_async",
    "refusal_message",
    "within_deadline",
]


def _told(observer: Observer | None, telemetry: Telemetry) -> Observer:
    """The guard's observer, and the run's telemetry told of the same decisions."""

    def both(event: str, data: dict[str, Any]) -> None:
        telemetry.decision(event, data)
        if observer is not None:
            observer(event, data)

    return both


def _guard_of(options: RunOptions) -> Guard:
    """The task's guard: ``guard=`` as given, or a new one for ``budget=`` (with ``store=``, ``task_id=``,
    ``policy=``, ``secrets=``, ``prices=``). There is no unlimited default, and the two ways do not mix. Without
    ``store=`` the task lives in the default persistent store, the one ``loopguard`` reads."""
    if options.guard is not None:
        mixed = [
            name for name in ("budget", "store", "task_id", "policy", "family") if getattr(options, name) is not None
        ]
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
        family=options.family,
    )


@dataclass(frozen=True)
class ModelAttempt:
    """A model attempt reserved by :meth:`GuardedRun.begin_model_attempt`: send it with this ``tool_choice``."""

    tool_choice: Any
    reserved: Reserved = NOTHING_RESERVED
    """Its worst-case cost and tokens, settled with the usage."""
    timeout: float | None = None
    """Seconds left before the task's deadline: the request must not outlive it (``None``: no deadline)."""
    span: Any = None
    """What the run's telemetry keeps of the attempt until it ends (:mod:`~agents_loopguard.run.telemetry`)."""


class GuardedRun(ToolCalls):
    """One guarded run and every run-level rule: its start (:meth:`start`), the ``tool_choice`` to send (R12), each
    model attempt reserved before it leaves and settled after, and (from :class:`ToolCalls` and
    :class:`~agents_loopguard.run.state.RunState`) one tool call and the decisions they share. Adapters drive it; it
    decides.

    Its fields are :class:`~agents_loopguard.run.state.RunState`'s.
    """

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
        check_declarations(options.tools)
        check_unguarded(options.unguarded, options.tools)
        guard = _guard_of(options)
        guard.check_prices()
        if guard.observer is None and observer is not None:
            guard.observer = observer
        telemetry = telemetry_for_run()
        if telemetry is not None:
            guard.observer = _told(guard.observer, telemetry)
        run = cls(
            guard,
            options,
            reset_forced_function=reset_forced_function,
            unwrap_values=unwrap_values,
            label=label,
            raises=raises,
            telemetry=telemetry,
        )
        if telemetry is not None:
            telemetry.run_started(run)
        return run

    def check_enforceable(self, model: str | None, max_output_tokens: int | None, *, where: str = "") -> None:
        """Refuse (``ValueError``) before anything runs a request shape whose limits the task could not enforce
        (no output bound with a cost budget or an output/total token limit; no price for ``model`` with a cost
        budget): the one check of every adapter; ``where`` names the request's origin (an agent)."""
        try:
            self.guard.check_request(model, max_output_tokens)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}" if where else str(exc)) from None

    def tool_choice(self, requested: Any, *, ahead: int = 0) -> Any:
        """The ``tool_choice`` to send with a request that offers tools (R12): once no work remains, whatever was
        asked becomes ``release`` (``"none"`` by default: the model answers; a requested ``"none"`` stays); while
        work remains, a forced function that already ran is sent as ``"auto"`` when ``reset_forced_function``.

        >>> from agents_loopguard import Budget, MemoryStore, RunOptions
        >>> run = GuardedRun.start(RunOptions(budget=Budget(model_turns=5, tool_executions=0), store=MemoryStore()))
        >>> run.tool_choice("required"), run.tool_choice("auto"), run.tool_choice(None)
        ('none', 'none', 'none')

        ``ahead=1`` decides for a request whose turn is not reserved yet (an adapter that binds the choice before
        the request reaches the model's client, where it is reserved).
        """
        if self.no_work_remains(ahead=ahead):
            return "none" if requested == "none" else self.release
        name = forced_name(requested)
        if self.reset_forced_function and name is not None and name in self.ran:
            return "auto"
        return requested

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
        span = self.telemetry.model_began(self, model) if self.telemetry is not None else None
        return ModelAttempt(choice, reserved, self.remaining(), span)

    def end_model_attempt(
        self, attempt: ModelAttempt, *, usage: tuple[int, int] | None = None, failure: ModelFailure | None = None
    ) -> None:
        """Settle a sent attempt: its real cost and tokens (the reported usage; an error response costs nothing, a
        timeout keeps its worst case) and a model entry in the task's timeline."""
        self.guard.settle_request(attempt.reserved, usage=usage, billed=failure.billed if failure is not None else None)
        self.guard.record_model_answer("answered" if failure is None else f"error:{failure.label}")
        if self.telemetry is not None:
            self.telemetry.model_ended(attempt.span, usage=usage, failure=failure.label if failure else None)

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
