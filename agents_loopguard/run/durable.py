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
  sent twice: its operation is ``unknown`` in the ledger, so the run ends ``needs_reconciliation`` (R6).

>>> class Fixed:
...     def model_step(self): return "wf-1:step-3"
...     def tool_step(self, call_id): return f"wf-1:tool:{call_id}"
>>> isinstance(Fixed(), DurableSteps)
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from ..values.calls import Verdict
from ..values.errors import StoreError
from ..values.outcome import Reason, Status

__all__ = ["DurableSteps", "recorded", "replayed"]


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
    output: Any, message: str | None, verdict: Verdict | None, ended: bool = False, done: Verdict | None = None
) -> dict[str, Any]:
    """What a durable replay of one execution gives back: what the model read (``output``, or ``message`` instead),
    the verdict behind it (``ended``: it ended the run) and the task's validated done when this execution proved it.

    >>> recorded("sent", None, None)
    {'output': 'sent', 'message': None, 'verdict': None, 'ended': False, 'done': None}
    """
    return {"output": output, "message": message, "verdict": _facts(verdict), "ended": ended, "done": _facts(done)}


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
