"""The state of one guarded Agents SDK run, and the translation between SDK events and the engine.

Nothing here decides a rule: the :class:`~agents_loopguard.core.Guard` does. This module only

* makes the active run reachable from tools that were decorated at import time (a contextvar, which asyncio copies
  into every task the SDK creates and ``asyncio.to_thread`` copies into the thread of a sync tool);
* turns an SDK tool invocation into ``authorize -> execute -> settle`` and a model attempt into ``begin_turn``;
* remembers the verdict that ends the run, so a stop decided inside one tool of a parallel batch does not cancel
  its siblings mid-flight: the run ends at the next checkpoint (the next model attempt) or when the SDK returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.exceptions import AgentsException
from agents.model_settings import ModelSettings
from agents.tracing import custom_span, get_current_trace
from agents.tracing.traces import NoOpTrace
from pydantic import BaseModel

from ..core import Call, Guard, Kind, Ticket, Verdict
from ..evidence import Effect, Evidence
from ..outcome import Reason, Status

__all__ = [
    "ACTIVE_RUN",
    "GuardedRun",
    "Halt",
    "OnRefusal",
    "ToolSpec",
    "current_guard",
]

OnRefusal = Literal["end", "continue", "raise"]
"""What a refused call does to the run: ``end`` it with the outcome (default), tell the model and ``continue``, or
end it and ``raise`` :class:`~agents_loopguard.sdk.GuardStopped` from the entry point."""

Release = Literal["auto", "none"]

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
    Reason.VALIDATED_DONE: "the task is already validated as done; give your final answer",
}


def trace_decision(event: str, data: dict[str, Any]) -> None:
    """A :class:`~agents_loopguard.core.Guard` observer: each guard decision becomes a ``loopguard.<event>`` custom
    span in the current Agents SDK trace (nothing when tracing is off or no trace is active). The data carries ids,
    counters and reasons, never arguments or results."""
    current = get_current_trace()
    if current is None or isinstance(current, NoOpTrace):
        return
    with custom_span(f"loopguard.{event}", data=dict(data)):
        pass


ACTIVE_RUN: ContextVar[GuardedRun | None] = ContextVar("agents_loopguard_run", default=None)
"""The guarded run of the current task (set by the entry points; copied by asyncio into tool tasks and threads)."""


def current_guard() -> Guard | None:
    """The :class:`~agents_loopguard.Guard` of the guarded run this code runs in, or ``None`` outside one.

    Works in async tools, in parallel tool calls and in sync tools (which the SDK runs in a thread).

    >>> current_guard() is None
    True
    """
    run = ACTIVE_RUN.get()
    return run.guard if run is not None else None


class Halt(AgentsException):
    """Ends an SDK run at a guard checkpoint. An ``AgentsException`` so that the SDK keeps its type (and run data)."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(f"agents_loopguard stopped the run: {verdict.status}/{verdict.reason}")
        self.verdict = verdict


Verify = Callable[[dict[str, Any], Any], Any]


@dataclass(frozen=True)
class ToolSpec:
    """What the guard needs to know about one tool: its kind, how a write names its operation, how to verify."""

    kind: Kind = "read"
    operation_id: Callable[[dict[str, Any]], Any] | None = None
    """Derives the stable business operation id of a write from its arguments."""
    verify: Verify | None = None
    """The application's trusted check ``verify(args, output) -> evidence`` (sync or async)."""
    declared: bool = True
    """False for a tool the run guards as a read because nobody declared it."""


def refusal_message(verdict: Verdict) -> str:
    """What the model reads instead of a tool output when the guard refuses or stops a call."""
    hint = _HINTS.get(verdict.reason, "the guard stopped this call")
    detail = f" ({verdict.detail})" if verdict.detail else ""
    return f"[agents_loopguard] {verdict.reason}: {hint}{detail}."


def forces_tool(choice: Any) -> bool:
    """True when ``tool_choice`` demands a tool call ("required", a tool name, a dict or an MCP choice)."""
    return choice is not None and choice not in ("auto", "none")


def jsonable(value: Any) -> Any:
    """A tool output in a form the ledger can store (pydantic models and dataclasses become dicts)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def result_output(result: Any) -> Any:
    """The tool output inside the engine result ``{"status": ..., "output": ...}`` this adapter builds."""
    if isinstance(result, Mapping) and set(result) == {"status", "output"}:
        return result["output"]
    return result


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def parse_arguments(tool: str, raw: str | None) -> tuple[dict[str, Any] | None, str]:
    """The model's JSON arguments as a dict, or ``None`` and why not (empty input is ``{}``, as in the SDK)."""
    if raw is None or not raw.strip():
        return {}, ""
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        return None, f"arguments for {tool!r} are not valid JSON: {exc}"
    if not isinstance(parsed, dict):
        return None, f"arguments for {tool!r} are a JSON {type(parsed).__name__}, not an object"
    return parsed, ""


@dataclass
class Flight:
    """One execution between its reservation and its result."""

    ticket: Ticket
    label: str


@dataclass
class GuardedRun:
    """The state of one guarded SDK run. Built by the entry points; reached by tools through :data:`ACTIVE_RUN`."""

    guard: Guard
    on_refusal: OnRefusal = "end"
    release: Release = "none"
    verdict: Verdict | None = None
    """The verdict that ends this run (first wins). Checked at every checkpoint."""
    done: Verdict | None = None
    """Set when a tool's verified evidence says the task is done; the run waits for the model's final answer."""
    told: list[Verdict] = field(default_factory=list)
    """Refusals and failures reported to the model while the run continued (``on_refusal="continue"``)."""
    flights: dict[int, Flight] = field(default_factory=dict)
    interrupted: list[Flight] = field(default_factory=list)
    """Executions whose task was cancelled before a result: a tool timeout, or the cancellation of the run."""
    failures: dict[int, Verdict] = field(default_factory=dict)
    """id(exception) -> verdict, for a tool failure that the SDK re-raises after the guard recorded it."""
    max_turns_handled: bool = False
    cancel_requested: bool = False
    _keys: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        if self.guard.observer is None:  # guard decisions show as spans in the SDK's trace
            self.guard.observer = trace_decision

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
        """Validated done, or no tool execution (or no later model turn to read a tool result) left."""
        used, budget = self.guard.used, self.guard.budget
        return self.done is not None or used.tools >= budget.tool_executions or used.models >= budget.model_turns

    # --- checkpoints -------------------------------------------------------------------------------------

    def drain_interrupted(self, reason: Reason = Reason.TOOL_TIMEOUT) -> None:
        """Executions cancelled while the run went on were tool timeouts: let the engine decide what they mean."""
        while self.interrupted:
            flight = self.interrupted.pop(0)
            self.report(self.guard.fail(flight.ticket, TimeoutError("the tool timed out"), reason=reason))

    def before_model_attempt(self, settings: ModelSettings) -> ModelSettings:
        """Reserve one model attempt before it is sent (raises :class:`Halt` when refused) and release a forced
        ``tool_choice`` once no work remains (R12)."""
        self.drain_interrupted()
        if self.verdict is not None:
            raise Halt(self.verdict)
        refused = self.guard.begin_turn()
        if refused is not None:
            raise Halt(self.stop(refused))
        if forces_tool(settings.tool_choice) and self.no_work_remains():
            return dataclasses.replace(settings, tool_choice=self.release)
        return settings

    def check_stop_mark(self) -> None:
        """Before a handoff: end the run if it is ending, or if the task carries a stop mark."""
        if self.verdict is not None:
            raise Halt(self.verdict)
        snapshot = self.guard.store.task(self.guard.task_id)
        if snapshot is not None and snapshot.stop_reason is not None:
            raise Halt(self.stop(Verdict(Status.STOPPED, Reason.STOP_REQUESTED, f"stop mark: {snapshot.stop_reason}")))

    # --- one tool execution ------------------------------------------------------------------------------

    def call(self, spec: ToolSpec, tool: str, args: dict[str, Any], call_id: str | None) -> tuple[Call, str]:
        """The engine's view of a tool call, and why a write has no operation id (if it has none).

        A write's operation id comes from the application's ``operation_id(args)``, never from the model's call id.
        """
        if spec.kind != "write" or spec.operation_id is None:
            return Call(tool, args, spec.kind, None, call_id), ""
        try:
            derived = spec.operation_id(args)
        except Exception as exc:  # the model's arguments lack what names the operation
            return Call(tool, args, "write", None, call_id), f"operation_id raised {type(exc).__name__}: {exc}"
        if isinstance(derived, str) and derived:
            return Call(tool, args, "write", derived, call_id), ""
        return Call(tool, args, "write", None, call_id), f"operation_id returned {derived!r}"

    def invalid_arguments(self, tool: str, raw: str | None, detail: str) -> Verdict:
        """Arguments that are not a JSON object: the engine refuses them as an invalid call."""
        verdict = self.guard.authorize({"tool": tool, "kind": "read", "args": raw})
        assert isinstance(verdict, Verdict), "the engine refuses a call whose arguments are not an object"
        return dataclasses.replace(verdict, detail=detail) if verdict.reason is Reason.INVALID_CALL else verdict

    def refuse_arguments(self, tool: str, raw: str | None, detail: str) -> str:
        """Malformed arguments from the model: refused before anything runs; the mode decides what follows."""
        if self.verdict is not None:
            return refusal_message(self.verdict)
        return self.report(self.invalid_arguments(tool, raw, detail))

    async def execute(
        self, spec: ToolSpec, call: Call, body: Callable[[], Awaitable[Any]], *, why_no_operation: str = ""
    ) -> Any:
        """``authorize -> body -> settle``. Returns the tool output, the stored result of a committed write, or a
        refusal message (the body never runs then). A failure of the body is recorded and re-raised, so the SDK's
        own failure handling (the tool's ``failure_error_function``) still decides what the model reads."""
        if self.verdict is not None:
            return refusal_message(self.verdict)
        if self.done is not None:
            return self.report(self.done)
        ticket = self.guard.authorize(call)
        if isinstance(ticket, Verdict):
            if ticket.reason is Reason.MISSING_OPERATION_ID and why_no_operation:
                ticket = dataclasses.replace(ticket, detail=why_no_operation)
            return self.report(ticket)
        if ticket.replay:
            output = result_output(ticket.result)
            verify = await self._evidence(spec, ticket, output)
        else:
            key = next(self._keys)
            flight = self.flights[key] = Flight(ticket, _label(call))
            try:
                output = await body()
                verify = await self._evidence(spec, ticket, output)  # still in flight until verified
            except asyncio.CancelledError:
                self.interrupted.append(flight)
                raise
            except Exception as exc:
                failed = self.guard.fail(ticket, exc)
                self.failures[id(exc)] = failed
                self.report(failed)
                raise
            finally:
                self.flights.pop(key, None)
        settled = self.guard.settle(ticket, {"status": "ok", "output": jsonable(output)}, verify)
        if settled is not None:
            if settled.status is Status.COMPLETED:
                if self.done is None:
                    self.done = settled
            else:
                self.stop(settled)  # progress rules and unknown effects end the run in every mode
        return output

    async def _evidence(self, spec: ToolSpec, ticket: Ticket, output: Any) -> Callable[[Any, Any], Any]:
        """Run the application's verify (it may be async) and hand its answer to the engine, which judges it."""
        if spec.verify is None:
            evidence = Evidence(revision=ticket.revision, done=False, effect=Effect.NONE)
            return lambda _proposal, _result: evidence
        try:
            raw = await maybe_await(spec.verify(dict(ticket.call.args), output))
        except Exception as exc:
            error = exc

            def failing(_proposal: Any, _result: Any) -> Any:
                raise error

            return failing
        return lambda _proposal, _result: raw

    # --- the end -----------------------------------------------------------------------------------------

    def in_flight(self) -> list[Flight]:
        return [*self.interrupted, *self.flights.values()]

    def closing(self, verdict: Verdict) -> tuple[Verdict, list[str]]:
        """End with ``verdict``; the engine decides what each call still in flight means (a write stays unknown,
        so the run needs reconciliation). Returns the verdict to end with and the calls that were in flight."""
        flights = self.in_flight()
        self.interrupted.clear()
        self.flights.clear()
        for flight in flights:
            failed = self.guard.fail(flight.ticket, asyncio.CancelledError(), reason=Reason.CANCELLED)
            if failed.status is Status.NEEDS_RECONCILIATION and verdict.status is not Status.NEEDS_RECONCILIATION:
                verdict = dataclasses.replace(failed, detail=f"{flight.label} was in flight when the run ended")
        return verdict, [flight.label for flight in flights]


def _label(call: Call) -> str:
    label = f"{call.tool}[{call.call_id or '?'}]"
    return f"{label} operation {call.operation_id}" if call.kind == "write" and call.operation_id else label
