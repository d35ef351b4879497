"""ADK's own approval door (R13): the answer to a tool confirmation (``adk_request_confirmation``'s function
response with a ``ToolConfirmation``) continues the stored pause it answers, once, with the task's counters.

The plugin stores the pause when an invocation ends waiting for confirmations (the pending calls by ADK's call id,
the task's limits and counters). The next invocation of the session that carries the answers is found here: the
pause that waits for exactly those calls is checked and claimed once
(:func:`~agents_loopguard.ops.approvals.continue_paused`, every adapter's one claim-then-continue), the decisions
recorded, and the run goes on under the
task's guard. A second delivery of the same answers (ADK resumes at least once) finds the pause resumed and is
refused before anything runs; answers no stored pause waits for are refused too: never a fresh budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.adk.events.event import Event
from google.adk.tools.tool_confirmation import ToolConfirmation

from ..ops.approvals import APPROVE, REJECT, continue_paused
from ..run.options import RunOptions

__all__ = ["CONFIRMATION", "answered_confirmations", "continue_pause"]

CONFIRMATION = "adk_request_confirmation"
"""The function ADK asks a human through (``google.adk.utils._function_call_names``)."""


def _originals(events: Sequence[Event]) -> dict[str, str]:
    """Confirmation call id -> the id of the call it asks about, from the session's events."""
    found: dict[str, str] = {}
    for event in events:
        for call in event.get_function_calls():
            original = (call.args or {}).get("originalFunctionCall")
            if call.name == CONFIRMATION and call.id and isinstance(original, dict) and original.get("id"):
                found[call.id] = str(original["id"])
    return found


def answered_confirmations(events: Sequence[Event]) -> dict[str, bool]:
    """The confirmations the session's last user message answers: original call id -> confirmed."""
    last = next((event for event in reversed(events) if event.author == "user"), None)
    if last is None:
        return {}
    originals = _originals(events)
    answers: dict[str, bool] = {}
    for response in last.get_function_responses():
        if response.name != CONFIRMATION or response.id not in originals:
            continue
        payload: Any = response.response or {}
        answers[originals[response.id]] = ToolConfirmation.from_response_dict(payload).confirmed
    return answers


def continue_pause(answers: dict[str, bool], options: RunOptions) -> RunOptions:
    """The options of the paused task the answers continue: its pause found by the calls it waits for, checked,
    the decisions recorded and the pause claimed once (another claim is refused: nothing runs twice)."""
    decisions = {call_id: APPROVE if confirmed else REJECT for call_id, confirmed in answers.items()}
    return continue_paused(
        options,
        list(answers),
        lambda _record: decisions,
        door="ADK tool confirmation",
        why="answered through ADK's tool confirmation",
    )
