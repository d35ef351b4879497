"""One tool call of a guarded run: a proposal built from a tool name and the model's raw JSON (``invalid_call``, a
write's ``operation_id`` and why it could not be derived), then authorize -> execute -> verify -> settle with the
tool's bounded retries, as a generator of effects (:class:`~agents_loopguard.run.effects.Execute`,
:class:`~agents_loopguard.run.effects.Check`, :class:`~agents_loopguard.run.effects.Sleep`) that an adapter
performs synchronously or on an event loop; the calls in flight, and what a cancellation or a timeout makes of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping
from typing import Any

from ..values.calls import KINDS, Call, Ticket, Verdict
from ..values.evidence import UNVERIFIED, Effect, Evidence, VerifyFailed
from ..values.outcome import Reason, Status
from .declarations import ToolSpec, Unnamed, parse_arguments, resolve
from .durable import BodyJournal, cancels, journal_of, recorded, replayed
from .effects import Answer, Check, DeadlineExceeded, Execute, Sleep
from .listed import NotDeclared, judge_listed
from .retry import ToolFailure
from .state import Executed, Flight, RunState, refusal_message

__all__ = ["ToolCalls", "jsonable"]

_AFTER_DONE = "not executed: the application already validated the task as done; give your final answer"


class ToolCalls(RunState):
    """One tool call, from the model's proposal to its settled result (see the module)."""

    def declaration(self, tool: str, own: ToolSpec | None = None) -> ToolSpec:
        """The declaration this run applies to ``tool``, given its wrapper's own (``own``) and the run's
        declarations by name (``RunOptions.tools``): the one rule of :func:`~agents_loopguard.run.declarations.resolve`
        (a conflict is a ``ValueError`` naming the fix; adapters ask for every tool they know when the run starts).

        >>> from agents_loopguard import Budget, MemoryStore, RunOptions
        >>> from agents_loopguard.run import GuardedRun, declare_tool
        >>> tools = {"lookup": declare_tool("lookup", max_executions=2)}
        >>> run = GuardedRun.start(RunOptions(budget=Budget(1, 1), store=MemoryStore(), tools=tools))
        >>> run.declaration("lookup").max_executions, run.declaration("search").declared
        (2, False)
        """
        return resolve(tool, own, self.options.tools)

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

    def listed_tool(self, tool: str, annotations: Any, *, server: str | None) -> ToolSpec | NotDeclared:
        """What the guard makes of a tool a server lists (MCP): its declaration, an unverified read (trusted
        read-only annotation, or the user's opt-out, ``RunOptions.unguarded``: each run of it recorded in the task's
        trace), or :class:`~agents_loopguard.run.listed.NotDeclared` (see :mod:`~agents_loopguard.run.listed`)."""
        return judge_listed(tool, annotations, server=server, options=self.options)

    def refuse_undeclared(self, refused: NotDeclared) -> Executed:
        """Refuse a call of a tool the guard will not run undeclared: nothing is reserved, the model reads which
        declaration to add (``invalid_call``)."""
        return self.refuse_invalid(refused.tool, "write", refused.why)

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
        limit, volatile, key = spec.max_executions, spec.volatile_args, spec.progress_key
        named = spec.operation_of(args)
        if named is None:
            return Call(tool, args, spec.kind, None, call_id, limit, volatile, key)
        if isinstance(named, Unnamed):
            return self._no_operation(Call(tool, args, "write", None, call_id, limit, volatile, key), named.why)
        return Call(tool, args, "write", named, call_id, limit, volatile, key, named_by_args=True)

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
        the engine's replay runs again returns what the model read the first time, reserving nothing (R17), and a
        body not run again has its own journaled steps taken by the engine (:class:`~.durable.BodyJournal`)."""
        if self.telemetry is None:
            return (yield from self._call(spec, call))
        span = self.telemetry.tool_began(self, call.tool, call.call_id, call.kind)
        executed: Executed | None = None
        error: str | None = None
        try:
            executed = yield from self._call(spec, call)
            return executed
        except BaseException as exc:
            error = type(exc).__name__
            raise
        finally:
            verdict = executed.verdict if executed is not None else None
            status, reason = (str(verdict.status), str(verdict.reason)) if verdict is not None else (None, None)
            if executed is not None and executed.error is not None:
                error = type(executed.error).__name__
            self.telemetry.tool_ended(span, status=status, reason=reason, error=error)

    def _call(self, spec: ToolSpec, call: Call) -> Generator[Any, Answer, Executed]:
        durable = self.options.durable
        key = durable.tool_step(call.call_id) if durable is not None else None
        if key is None:
            return (yield from self._execute(spec, call))
        step = self.guard.begin_step(key)
        journal = durable if isinstance(durable, BodyJournal) else None
        began = journal.body_began(key, lambda: self._note_journal(key)) if journal is not None else None
        if step.done:
            body = journal_of(step.output)
            if journal is not None and body is not None:
                yield from self._pass_over(journal, call, body, began, lambda: True)
            return self._replayed(step.output)
        before, executed = self.done, (yield from self._execute(spec, call, lost=step.attempts > 1))
        ran = journal.body_ended(began) if journal is not None else None
        if journal is not None and ran is None and step.attempts > 1:  # an attempt died in the body, not run now
            yield from self._pass_over(journal, call, None, began, lambda: self._journal_noted(key))
        if executed.error is None:  # a body's exception is the framework's to report: run again on a replay
            ended, proved = self.verdict is executed.verdict, self.done if self.done is not before else None
            record = recorded(executed.output, executed.message, executed.verdict, ended, proved, journal=ran)
            self.guard.end_step(key, record)
        return executed

    def _pass_over(
        self, journal: BodyJournal, call: Call, body: Any, began: Any, noted: Callable[[], bool]
    ) -> Generator[Any, Answer, None]:
        """Take the engine past the journaled steps of a body that is not run again; an engine that needs the body
        itself for that gets it run journal-only (each step answered from its journal, its output not used)."""
        answer = yield Check(journal.pass_over, (body, began, noted))
        if answer.error is not None:
            raise answer.error
        if answer.value:
            with journal.journal_only():
                yield Execute(call, 0, self.remaining())

    def keep_step(self, key: str, output: Any) -> None:
        """Record a durable engine's step of this run under ``key`` as ended with ``output`` (JSON, redacted), for
        a later attempt to read with :meth:`kept_step` (the first record stands)."""
        self.guard.begin_step(key)
        self.guard.end_step(key, output)

    def kept_step(self, key: str) -> Any:
        """What :meth:`keep_step` recorded under ``key``, or ``None``."""
        step = self.guard.begin_step(key)
        return step.output if step.done else None

    def _note_journal(self, key: str) -> None:
        """The body of ``key`` begins to journal steps of its own (kept for an attempt after this one dies)."""
        self.guard.begin_step(f"{key}#journaled")
        self.guard.end_step(f"{key}#journaled", True)

    def _journal_noted(self, key: str) -> bool:
        """Whether the body of ``key`` began to journal in an attempt that died (asked once; the answer kept)."""
        step = self.guard.begin_step(f"{key}#journaled")
        if step.done:
            return bool(step.output)
        noted = step.attempts > 1  # the note began and its attempt died before it ended
        self.guard.end_step(f"{key}#journaled", noted)
        return noted

    def restore(self, record: Any) -> Executed:
        """The run's state as a :func:`~.durable.recorded` execution left it (its validated done, the verdict that
        ended the run), read in another process than the one that executed it (a durable engine's conclusion):
        what the model read then."""
        return self._replayed(record)

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

    def _execute(self, spec: ToolSpec, call: Call, *, lost: bool = False) -> Generator[Any, Answer, Executed]:
        """``lost``: an earlier attempt of this execution died (a durable engine re-executes it), so a write it left
        unknown may be probed."""
        if (skipped := self._skipped()) is not None:
            return skipped
        ticket = self.guard.authorize(call)
        attempt, asked = 1, Asked()
        while True:
            if isinstance(ticket, Verdict):
                held = self.guard.held_write(call) if lost and _probes(spec, ticket) else None
                lost = False  # the dead attempt's write is asked about once
                if held is not None and (yield from self._ask(spec, held, asked)):
                    ticket = self.guard.authorize(call)
                    continue
                return self._refused(ticket)
            outcome = yield from self._attempt(spec, ticket, attempt)
            if isinstance(outcome, Lost):
                if (yield from self._ask(spec, outcome.ticket, asked)):
                    ticket, attempt = self.guard.authorize(call, retry_of=outcome.ticket), attempt + 1
                    continue
                return outcome.stands(_settled_failure(outcome.verdict, asked))
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

    def _ask(self, spec: ToolSpec, ticket: Ticket, asked: Asked) -> Generator[Any, Answer, bool]:
        """Ask the receiver about ``ticket``'s write, whose answer was lost, with the tool's probe (R20): True when
        the write may be authorized again, its answer recorded in the ledger (committed: its result is returned;
        not_committed: one new attempt per call). Each probe is reserved by the guard; a probe that answers
        ``unknown``, raises or answers garbage leaves the operation unknown."""
        if spec.probe is None or not self.guard.lost_operation(ticket):
            return False
        probe, attempt = spec.probe, 1
        assert ticket.call.operation_id is not None, "only a write is probed"
        while self.guard.begin_probe(ticket, attempt=attempt) is None:
            answer = yield Check(probe, (ticket.call.operation_id, dict(ticket.call.args)))
            said = self.guard.record_probe(ticket, answer.value, error=answer.error)
            if said is not None and said.state != "unknown":
                asked.said = said.state
                if said.state == "committed":
                    return True
                again, asked.resent = not asked.resent, True
                return again
            attempt += 1
        return False

    def _attempt(
        self, spec: ToolSpec, ticket: Ticket, attempt: int
    ) -> Generator[Any, Answer, Executed | ToolFailure | Lost]:
        """One authorized attempt: its result, or the transient failure (verified without effect) to retry."""
        failure: ToolFailure | None = None
        if ticket.replay:  # a committed write: its stored result, never a second execution
            output = _output_of(ticket.result)
            evidence = yield from self._evidence(spec, ticket, output)
        else:
            self._note_unguarded(spec, ticket.call.tool)
            key = next(self._keys)
            flight = self.flights[key] = Flight(ticket, self.label(ticket.call))
            try:
                answer = yield Execute(ticket.call, attempt, self.remaining())
                if answer.error is not None and cancels(self.options.durable, answer.error):
                    raise answer.error  # the engine cancelled the run inside the body: the call stays in flight
                if isinstance(answer.error, DeadlineExceeded):
                    return self._lost(spec, ticket, answer.error, Reason.DEADLINE)
                if answer.error is not None:
                    kind = spec.retry.classify(answer.error)
                    if kind is None:
                        return self._lost(spec, ticket, answer.error, Reason.EXECUTOR_EXCEPTION)
                    failure = ToolFailure(answer.error, kind, attempt)
                output = failure if failure is not None else answer.value
                evidence = yield from self._evidence(spec, ticket, output, failed=failure is not None)
            except BaseException:
                self.interrupted.append(flight)  # executed, not verified: still in flight
                raise
            finally:
                self.flights.pop(key, None)
        verdict = self.guard.settle(ticket, self._result(output, failure), evidence=evidence)
        if verdict is not None and spec.probe is not None and _unproven_write(ticket, verdict):
            ran = failure is None
            return Lost(ticket, verdict, lambda settled: self._settled(settled, output, ran=ran))
        if verdict is not None:
            if failure is not None and failure.kind == "permission" and verdict.reason is Reason.APPROVAL:
                detail = f"{ticket.call.tool}: {self.guard.storable(str(failure))}: a permission error is never retried"
                verdict = dataclasses.replace(verdict, reason=Reason.PERMISSION, detail=detail)
            return self._settled(verdict, output, ran=failure is None)
        if failure is None:
            self.ran.add(ticket.call.tool)
            return Executed(output=output)
        return failure

    def _note_unguarded(self, spec: ToolSpec, tool: str) -> None:
        """A body about to run by the application's opt-out (an undeclared tool named in ``RunOptions.unguarded``):
        recorded in the task's trace, each run, as an ``unguarded`` entry (the execution itself is the reserved
        one)."""
        why = None if spec.declared else self.options.unguarded.get(tool)
        if why is not None:
            self.guard.record_unguarded(tool, why, result_class="undeclared")

    def _lost(self, spec: ToolSpec, ticket: Ticket, error: Exception, reason: Reason) -> Executed | Lost:
        """The body raised (or outlived the deadline): recorded as failed; a write its tool can probe is
        :class:`Lost` (the receiver is asked before the failure stands)."""
        failed = self.guard.fail(ticket, error, reason=reason)
        if spec.probe is not None and ticket.call.kind == "write":
            return Lost(ticket, failed, lambda settled: self._failure(error, settled))
        return self._failure(error, failed)

    def _failure(self, error: Exception, failed: Verdict) -> Executed:
        reason = failed.reason
        self.failures[id(error)] = (error, failed)
        if self.failures_given_back and reason is Reason.EXECUTOR_EXCEPTION:
            return Executed(message=refusal_message(failed), error=error, verdict=failed)
        return Executed(message=self.report(failed), error=error, verdict=failed)

    def failure_stands(self, executed: Executed) -> str:
        """A body's failure given back to the framework (``failures_given_back``) that no retry layer overcame:
        reported now (the run ends per ``on_refusal``); returns what the model reads."""
        assert executed.verdict is not None, "only a recorded failure stands"
        if self.verdict is not None:
            return refusal_message(self.verdict)
        return self.report(executed.verdict)

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
            return Evidence(revision=self.guard.progress_revision(ticket.call, ticket), done=False, effect=Effect.NONE)
        if spec.verify is None:
            return UNVERIFIED
        answer = yield Check(spec.verify, (dict(ticket.call.args), output))
        return VerifyFailed(answer.error) if answer.error is not None else answer.value

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


@dataclasses.dataclass
class Asked:
    """The probes of one proposed call: a ``not_committed`` answer allows one new attempt, once per call."""

    resent: bool = False
    said: str | None = None
    """The receiver's last answer recorded in the ledger (``None``: nothing recorded)."""


def _settled_failure(failed: Verdict, asked: Asked) -> Verdict:
    """A body's failure, once the receiver proved the write never happened (again, after its one new attempt): the
    operation is ``not_committed`` in the ledger, so the failure no longer needs reconciliation."""
    if asked.said != "not_committed":
        return failed
    detail = f"{failed.detail}; the receiver says the write never happened (not_committed)"
    reason = Reason.EXECUTOR_EXCEPTION if failed.reason is Reason.UNKNOWN_COMMIT else failed.reason
    return Verdict(Status.STOPPED, reason, detail)


@dataclasses.dataclass(frozen=True)
class Lost:
    """An attempt of a write whose answer was lost (its body raised, or its verify could not prove the effect): its
    failure (recorded) stands unless the receiver settles it."""

    ticket: Ticket
    verdict: Verdict
    stands: Callable[[Verdict], Executed]
    """What the run makes of the failure when it stands (given the verdict it ends with)."""


def _unproven_write(ticket: Ticket, verdict: Verdict) -> bool:
    """The settled attempt of a write (not a replay) whose effect was not proven: its answer is lost."""
    return ticket.call.kind == "write" and not ticket.replay and verdict.reason is Reason.UNKNOWN_COMMIT


def _probes(spec: ToolSpec, refused: Verdict) -> bool:
    """A refusal a probe may settle: a write of a tool with a probe, refused because its operation is unknown."""
    return spec.probe is not None and refused.reason is Reason.UNKNOWN_COMMIT


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
