"""Durable engines replay (R17): where a guarded run is inside an engine's workflow, and the rule that makes a replay
count once.

A durable engine (DBOS, Temporal, Restate) runs a workflow as steps it records. After a crash it runs the workflow
again: a step it recorded is answered from its own log (the step's body does not run), and the step that was running
is executed again. The guard's model wrapper runs *inside* the engine's model step, so a replayed model call never
reaches it; what does reach it is keyed by the engine's identity of the step (:class:`DurableSteps`):

* a model call the engine re-executes is the same request's attempt again: counted once more (the request is sent
  again), and recorded as a re-execution;
* a tool execution the engine's replay runs again (tools are often not steps of their own) is answered with what the
  model read the first time: nothing is reserved or counted, the body does not run;
* a tool execution that began and never ended (its worker died) runs again as a retry; a write in it is still never
  sent twice: its operation is ``unknown`` in the ledger, so the run ends ``needs_reconciliation`` (R6);
* a tool body that journals steps of its own (a DBOS step or transaction, Restate's ``ctx.run``) is not run again
  either, yet the engine expects its journal to be taken again in order: an engine that says how
  (:class:`BodyJournal`) is taken past the body's journaled steps, each answered from its own journal, never run
  twice, whether the execution is answered from the record or refused after an attempt that died inside it.

>>> class Fixed:
...     def model_step(self): return "wf-1:step-3"
...     def tool_step(self, call_id): return f"wf-1:tool:{call_id}"
>>> isinstance(Fixed(), DurableSteps)
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from ..values.calls import Verdict
from ..values.errors import StoreError
from ..values.outcome import Outcome, Reason, Status

__all__ = [
    "BodyJournal",
    "DurableSteps",
    "EngineCancels",
    "Replay",
    "cancels",
    "journal_of",
    "recorded",
    "replay_of",
    "replayed",
]


@runtime_checkable
class DurableSteps(Protocol):
    """Where a durable engine is in its workflow, read when the guard needs it (``RunOptions.durable``).

    Each method returns a key stable across the engine's replays and re-executions of the same step, unique within
    the task (include the workflow's id), or ``None`` when the code runs outside the engine's workflow (the rule
    then does not apply).
    """

    def model_step(self) -> str | None:
        """The key of the engine's step that runs the current model call (e.g. DBOS: workflow id and step id)."""
        ...

    def tool_step(self, call_id: str | None) -> str | None:
        """The key of the tool execution of the model's call ``call_id`` in the current workflow (the call id comes
        from the model's recorded response, so a replay sees the same one)."""
        ...


@runtime_checkable
class BodyJournal(Protocol):
    """A durable engine whose tool bodies may journal steps of their own (a DBOS step or transaction as the tool's
    function, Restate's ``ctx.run`` in a tool body): how its journal is kept in step when the guarded run does not
    run a body again (``RunOptions.durable`` may implement it beside :class:`DurableSteps`).

    The guarded run calls :meth:`body_began` and :meth:`body_ended` around every body it runs, stores what the body
    journaled with the execution's record, and calls :meth:`pass_over` when the body is not run: answered from the
    record, or refused after an attempt that died inside it (a write whose effect is unknown).
    """

    def body_began(self, key: str, noted: Callable[[], None]) -> Any:
        """The body of the execution ``key`` is about to run: the engine's position (handed back to
        :meth:`body_ended` and :meth:`pass_over`). An engine that cannot read a dead attempt's journal calls
        ``noted()`` before the body's first journaled step, so a later attempt knows the body journaled."""
        ...

    def body_ended(self, began: Any) -> Any:
        """The body ran: what it journaled (JSON, stored with the execution's record), or ``None`` for nothing."""
        ...

    def pass_over(self, journal: Any, began: Any, noted: Callable[[], bool]) -> Any:
        """The body is not run: take the engine past its journaled steps, ``journal`` as :meth:`body_ended` gave it
        (``None`` for a body whose attempt died: ``noted()`` says whether it had begun to journal). Returns (or
        resolves to, when async) ``True`` when the engine needs the body itself run again to take its steps, under
        :meth:`journal_only`, else ``False``."""
        ...

    def journal_only(self) -> AbstractContextManager[Any]:
        """While a body runs again to take its journaled steps: each is answered from the engine's journal, and a
        step the journal holds no result for fails without running (never a second effect)."""
        ...


@runtime_checkable
class EngineCancels(Protocol):
    """A durable engine whose cancellation reaches a tool body as an ordinary exception (Restate's
    ``TerminalError`` 409 at the body's next journaled step): the guarded run keeps such a call in flight (a write's
    effect unknown) and lets the exception end the run, instead of settling it as the body's failure."""

    def is_cancellation(self, error: BaseException) -> bool:
        """Whether ``error`` out of a tool body is the engine cancelling the run."""
        ...


def cancels(durable: Any, error: BaseException) -> bool:
    """Whether ``error`` out of a tool body is the durable engine's cancellation (see :class:`EngineCancels`).

    >>> cancels(None, ValueError("a bug"))
    False
    """
    return isinstance(durable, EngineCancels) and durable.is_cancellation(error)


def _facts(verdict: Verdict | None) -> list[Any] | None:
    if verdict is None:
        return None
    value = verdict.value if verdict.has_value else None
    return [str(verdict.status), str(verdict.reason), verdict.detail, verdict.operation_id, verdict.has_value, value]


def _verdict(facts: Any) -> Verdict | None:
    if facts is None:
        return None
    status, reason, detail, operation_id, has_value, value = facts
    verdict = Verdict(Status(status), Reason(reason), str(detail), operation_id)
    return dataclasses.replace(verdict, value=value) if has_value else verdict


def recorded(
    output: Any,
    message: str | None,
    verdict: Verdict | None,
    ended: bool = False,
    done: Verdict | None = None,
    journal: Any = None,
) -> dict[str, Any]:
    """What a durable replay of one execution gives back: what the model read (``output``, or ``message`` instead),
    the verdict behind it (``ended``: it ended the run), the task's validated done when this execution proved it,
    and what the body journaled in the engine (:meth:`BodyJournal.body_ended`; kept only when there is some).

    >>> recorded("sent", None, None)
    {'output': 'sent', 'message': None, 'verdict': None, 'ended': False, 'done': None}
    >>> recorded("sent", None, None, journal=[3, 4])["journal"]
    [3, 4]
    """
    record = {"output": output, "message": message, "verdict": _facts(verdict), "ended": ended, "done": _facts(done)}
    if journal is not None:
        record["journal"] = journal
    return record


def journal_of(record: Any) -> Any:
    """What the body of a :func:`recorded` execution journaled in the engine, or ``None``.

    >>> journal_of(recorded("sent", None, None, journal=[3, 4])), journal_of(recorded("sent", None, None))
    ([3, 4], None)
    """
    return record.get("journal") if isinstance(record, Mapping) else None


def replayed(record: Any) -> tuple[Any, str | None, Verdict | None, bool, Verdict | None]:
    """The output, message, verdict, ``ended`` and done verdict of a :func:`recorded` execution; a record that is
    not one (a damaged or tampered store) is a :class:`~agents_loopguard.values.errors.StoreError`.

    >>> replayed(recorded(None, "refused", Verdict(Status.STOPPED, Reason.SAME_CALL, "again"), ended=True))[1:4]
    ('refused', Verdict(status=<Status.STOPPED: 'stopped'>, reason=<Reason.SAME_CALL: 'same_call'>, detail='again', \
operation_id=None), True)
    >>> replayed({"output": 1})
    Traceback (most recent call last):
    ...
    agents_loopguard.values.errors.StoreError: the store holds a damaged record of a durable step ({'output': 1}): \
restore the database from a backup
    """
    try:
        assert isinstance(record, Mapping)
        message = record["message"]
        assert message is None or isinstance(message, str)
        verdict, done = _verdict(record["verdict"]), _verdict(record["done"])
        return record["output"], message, verdict, bool(record["ended"]), done
    except (AssertionError, KeyError, IndexError, TypeError, ValueError):
        raise StoreError(
            f"the store holds a damaged record of a durable step ({str(record)[:80]}): restore the database from a "
            "backup"
        ) from None


@dataclasses.dataclass(frozen=True)
class Replay:
    """On ``Outcome.result`` of a run that ran nothing: the task had already ended (in an earlier attempt of the same
    invocation, or in another workflow, request or fork given the same task), and the outcome is that stored one.

    >>> Replay("t-1").task_id
    't-1'
    """

    task_id: str


REPLAY_NOTE = "a replay of a task that had already ended"
"""How the ``detail`` of a replayed outcome begins."""


def replay_of(outcome: Outcome) -> Outcome:
    """``outcome`` (a task's stored outcome) as what a run that ran nothing returns: marked as a replay (its
    ``result`` a :class:`Replay`, its ``detail`` saying so), the status, reason and counters unchanged.

    >>> from agents_loopguard import Outcome, Reason, Status
    >>> again = replay_of(Outcome(Status.STOPPED, Reason.MODEL_BUDGET, task_id="t-1", detail="2 of 2 turns"))
    >>> again.detail, again.result
    ('a replay of a task that had already ended: 2 of 2 turns', Replay(task_id='t-1'))
    """
    if isinstance(outcome.result, Replay):
        return outcome
    detail = f"{REPLAY_NOTE}: {outcome.detail}" if outcome.detail else REPLAY_NOTE
    return dataclasses.replace(outcome, detail=detail, result=Replay(outcome.task_id))
