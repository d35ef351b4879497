"""How a guarded run ends: one function decides the end-of-run verdict for every adapter, with one precedence, and
ends the task with one outcome.

An adapter only says what it saw, as an :class:`Ending` (the final answer, approval interruptions waiting, a
cancellation, the exception its framework raised, the framework's own stop such as ``max_turns``); it builds no
verdict and no outcome. The precedence, first match wins:

1. a cancellation: ``stopped/cancelled`` (a write in flight: ``needs_reconciliation``);
2. the guard's own decision (a refusal, the stop mark, a budget: whatever ended the run first);
3. an exception out of the framework's run: a tool's or a model request's failure the guard recorded; the
   framework's own stop (``max_turns``, a guardrail, a model that misbehaved, a tool timeout); an API error of the
   model; anything else is a **programming error**: the task ends ``stopped/fatal`` (never left ``running``) and the
   exception is re-raised, in every adapter;
4. approval interruptions waiting: ``needs_human/approval``, the pause stored with the task's budget;
5. the framework's own stop reported without an exception (an error handler answered ``max_turns``);
6. a validated done (it stands without its final answer);
7. the final answer: ``completed`` when ``verify_output`` validates it, else ``partial/unverified_final``.

A validated done then stands over anything but an unknown write, and a write still in flight stays unknown.

>>> from agents_loopguard import Budget, MemoryStore, RunOptions
>>> from agents_loopguard.run import GuardedRun, drive, perform_check
>>> options = RunOptions(budget=Budget(3, 1), store=MemoryStore(), verify_output=lambda text: "42" in text)
>>> run = GuardedRun.start(options)
>>> drive(conclude(run, Ending(output="The answer is 42.")), perform_check).reason
<Reason.VALIDATED_DONE: 'validated_done'>
>>> run = GuardedRun.start(RunOptions(budget=Budget(3, 1), store=MemoryStore()))
>>> drive(conclude(run, Ending(error=ZeroDivisionError("a bug"))), perform_check)
Traceback (most recent call last):
...
ZeroDivisionError: a bug
>>> run.guard.outcome.status, run.guard.outcome.reason
(<Status.STOPPED: 'stopped'>, <Reason.FATAL: 'fatal'>)
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal

from ..engine.core import Guard
from ..values.calls import Verdict
from ..values.evidence import ResultStatus, parse_evidence
from ..values.outcome import Outcome, Reason, Status
from .effects import Answer, Check, drive, perform_check
from .guarded import GuardedRun
from .model_errors import classify_model_error
from .tool_calls import _output_of, jsonable

__all__ = ["NO_OUTPUT", "Ending", "StopKind", "conclude", "conclude_now", "decide"]

NO_OUTPUT: Any = object()
"""The run returned no final answer."""

StopKind = Literal["max_turns", "guardrail", "model_behavior", "model_error", "tool_timeout"]
"""How a framework ends a run by itself: its turn limit, a guardrail, a model that misbehaved (an unreadable or
refused answer), a model request that timed out in the framework, a tool's own timeout."""
_STOP_REASONS: dict[str, Reason] = {
    "max_turns": Reason.MAX_TURNS,
    "guardrail": Reason.GUARDRAIL,
    "model_behavior": Reason.MODEL_BEHAVIOR,
    "model_error": Reason.MODEL_ERROR,
}
PauseStore = Callable[[Any, Guard], Any]
"""``store(result, guard) -> pause_id | None`` (sync or async): stores an approval pause of the framework's run."""


@dataclass(frozen=True)
class Ending:
    """What an adapter saw when its framework's run ended (translation only: no verdict)."""

    output: Any = NO_OUTPUT
    """The model's final answer, when the run returned one."""
    waiting: str | None = None
    """Approval interruptions are waiting: what for (stored by the options' ``on_pause`` or ``store_pause``)."""
    store_pause: PauseStore | None = None
    """The adapter's way of storing a pause of its framework's run state (``RunOptions.on_pause`` wins)."""
    error: BaseException | None = None
    """The exception the framework's run raised."""
    stopped_by: StopKind | None = None
    """The framework ended the run itself (with ``error``, or without one when an error handler answered)."""
    tool: str | None = None
    """The tool whose own timeout ended the run (``stopped_by="tool_timeout"``)."""
    detail: str | None = None
    """What the adapter can say about the framework's stop or the cancellation."""
    cancelled: bool = False
    """The run was cancelled (its task, ``stream.cancel()``, an interrupt)."""
    result: Any = None
    """The framework's result (or the run data of its exception), kept on ``Outcome.result``."""
    tools_offered: bool = True
    """The model was offered tools (a final answer after the tool budget ran out says so)."""


def conclude(run: GuardedRun, ending: Ending) -> Generator[Check, Answer, Outcome]:
    """End the run's task with the verdict of ``ending`` (the module's precedence): a generator of effects (the
    application's ``verify_output`` and pause store, performed by :func:`~agents_loopguard.run.drive` or
    :func:`~agents_loopguard.run.adrive`) returning the task's one outcome. A programming error is re-raised after
    the task ended ``stopped/fatal``; ``on_refusal="raise"`` raises :class:`~agents_loopguard.GuardStopped`."""
    verdict, raised = yield from decide(run, ending)
    pause_id: str | None = None
    if verdict.reason is Reason.APPROVAL and ending.waiting is not None and verdict is not run.verdict:
        store = run.options.on_pause or ending.store_pause
        if store is not None:
            answer = yield Check(store, (ending.result, run.guard))
            if answer.error is not None:  # the application's pause store failed: the task must not stay running
                verdict = _fatal(answer.error, "storing the approval pause")
                raised = answer.error
            elif isinstance(answer.value, str):
                pause_id = answer.value
    output = None if ending.output is NO_OUTPUT else ending.output
    outcome = end(run, verdict, result=ending.result, pause_id=pause_id, final_output=output)
    if raised is not None:
        raise raised
    return outcome


def conclude_now(run: GuardedRun, ending: Ending) -> Outcome:
    """:func:`conclude` where nothing asynchronous can be asked (a cancellation or an interrupt: no check runs)."""
    return drive(conclude(run, ending), perform_check)


def _fatal(error: BaseException, during: str = "") -> Verdict:
    where = f" while {during}" if during else ""
    return Verdict(Status.STOPPED, Reason.FATAL, f"{type(error).__name__}{where}: {error}")


def decide(run: GuardedRun, ending: Ending) -> Generator[Check, Answer, tuple[Verdict, BaseException | None]]:
    """The verdict of ``ending`` by the module's precedence, and the programming error to re-raise (if any),
    without ending the task (:func:`conclude` ends it)."""
    if ending.cancelled or run.cancel_requested:
        return Verdict(Status.STOPPED, Reason.CANCELLED, ending.detail or "the run was cancelled"), None
    if run.verdict is not None:
        return run.verdict, None
    if ending.error is not None:
        return _error_verdict(run, ending, ending.error)
    run.drain_interrupted()  # a body the tool's timeout abandoned while the run went on
    if run.verdict is not None:
        return run.verdict, None
    if ending.waiting is not None:
        return Verdict(Status.NEEDS_HUMAN, Reason.APPROVAL, ending.waiting), None
    if ending.stopped_by is not None:
        return _stopped_by(run, ending, None), None
    if run.done is not None:
        return run.done, None
    if ending.output is NO_OUTPUT:
        return Verdict(Status.STOPPED, Reason.FATAL, "the run ended without an answer or a reason"), None
    answer = None
    verify_output = run.options.verify_output
    if verify_output is not None:
        answer = yield Check(verify_output, (ending.output,))
    return final_verdict(run, ending.output, answer, tools_offered=ending.tools_offered), None


def _error_verdict(run: GuardedRun, ending: Ending, error: BaseException) -> tuple[Verdict, BaseException | None]:
    recorded = run.recorded_failure(error)
    if recorded is not None:
        return recorded, None
    if ending.stopped_by is not None:
        return _stopped_by(run, ending, error), None
    failure = classify_model_error(error)
    if failure is not None:
        return run.model_error(failure), None
    return _fatal(error), error


def _stopped_by(run: GuardedRun, ending: Ending, error: BaseException | None) -> Verdict:
    kind = ending.stopped_by
    if kind == "tool_timeout":
        return run.timed_out(ending.tool or "", error or TimeoutError(ending.detail or "the tool timed out"))
    assert kind is not None
    detail = ending.detail
    if detail is None and error is not None:
        detail = str(error) if kind == "max_turns" else f"{type(error).__name__}: {error}"
    return Verdict(Status.STOPPED, _STOP_REASONS[kind], detail or f"the framework stopped the run ({kind})")


def final_verdict(run: GuardedRun, output: Any, answer: Answer | None, *, tools_offered: bool = True) -> Verdict:
    """The verdict of a final answer: ``verify_output``'s answer (a bool, or evidence saying done) completes the
    task; without it the answer is ``partial/unverified_final``."""
    if answer is not None:
        if answer.error is not None:
            return Verdict(
                Status.STOPPED, Reason.INVALID_EVIDENCE, f"verify_output raised {type(answer.error).__name__}"
            )
        done = _output_done(run, answer.value)
        if isinstance(done, Verdict):
            return done
        if done:
            return Verdict(
                Status.COMPLETED, Reason.VALIDATED_DONE, "the application validated the final output", value=output
            )
    used, budget = run.guard.used, run.guard.budget
    why = " after the tool budget ran out" if tools_offered and used.tools >= budget.tool_executions else ""
    told = sorted({str(v.reason) for v in run.told})
    refused = f" (refused: {', '.join(told)})" if told else ""
    detail = f"the model gave a final answer{why}; the application did not validate the task as done{refused}"
    return Verdict(Status.PARTIAL, Reason.UNVERIFIED_FINAL, detail)


def _output_done(run: GuardedRun, raw: Any) -> bool | Verdict:
    if isinstance(raw, bool):
        return raw
    evidence = parse_evidence(raw, status=ResultStatus.OK, current_revision=run.guard.output_revision())
    if isinstance(evidence, str):
        return Verdict(Status.STOPPED, Reason.INVALID_EVIDENCE, f"verify_output: {evidence}")
    return evidence.done


def _in_flight(run: GuardedRun, verdict: Verdict) -> tuple[Verdict, list[str]]:
    """The verdict a run ends with, and the calls that were in flight. A validated done stands without its final
    answer (a refused final turn, a stop, a fault do not undo it); a write still in flight stays unknown, so the run
    needs reconciliation."""
    if run.done is not None and verdict.status is not Status.NEEDS_RECONCILIATION:
        verdict = run.done
    flights = [*run.interrupted, *run.flights.values()]
    run.interrupted.clear()
    run.flights.clear()
    for flight in flights:
        failed = run.guard.fail(flight.ticket, asyncio.CancelledError(), reason=Reason.CANCELLED)
        if failed.status is Status.NEEDS_RECONCILIATION and verdict.status is not Status.NEEDS_RECONCILIATION:
            verdict = dataclasses.replace(failed, detail=f"{flight.label} was in flight when the run ended")
    return verdict, [flight.label for flight in flights]


def end(
    run: GuardedRun, verdict: Verdict, *, result: Any = None, pause_id: str | None = None, final_output: Any = None
) -> Outcome:
    """End the task with ``verdict`` (a validated done and the calls in flight considered); raises the run's
    :class:`~agents_loopguard.GuardStopped` in ``raise`` mode when the guard stopped the run. ``final_output`` is
    the model's last answer, stored with the outcome (redacted)."""
    verdict, in_flight = _in_flight(run, verdict)
    value = verdict.value if verdict.status is Status.COMPLETED and verdict.has_value else run.guard.last_good
    if run.unwrap_values:
        value = _output_of(value)
    outcome = run.guard.end(
        dataclasses.replace(verdict, value=value),
        in_flight=in_flight,
        result=result,
        pause_id=pause_id,
        final_output=jsonable(final_output),
    )
    if run.telemetry is not None:
        run.telemetry.run_ended(run, outcome, pause_id)
    if run.on_refusal == "raise" and verdict is run.verdict and outcome.status is not Status.COMPLETED:
        raise run.raises(outcome)
    return outcome
