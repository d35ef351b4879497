"""After a decision: tell someone (a signed webhook), and find the decided pauses a worker should resume.

:class:`DecisionNotifier` posts each decision on a pause (who decided, what, the pending calls and their redacted
arguments) through the same :class:`~agents_loopguard.ops.webhooks.Webhook` as the pause notices: in the
background, retried, signed with ``$LOOPGUARD_WEBHOOK_SECRET``. :func:`agents_loopguard.ops.approvals.decide` (and
so ``loopguard approve``/``reject``, the API and the console) calls the notifier named by
``$LOOPGUARD_DECISION_WEBHOOK`` (with ``$LOOPGUARD_CONSOLE_URL`` for the link), or the one passed as ``notify=``.

:func:`decided_pauses` lists the pauses of given tasks or task families that are decided and not resumed yet: what
:func:`agents_loopguard.sdk.resume_decided` resumes, each claimed once across workers.

>>> message = decision_message({"pause_id": "p-1", "task_id": "t-1", "family": "t", "decided_by": "ana",
...     "decided_why": "<!channel>", "decisions": {"c1": "approve"}, "calls": [{"call_id": "c1", "tool": "refund",
...     "operation_id": "refund-42", "arguments": {"amount": 80}, "decision": "approve"}]})
>>> message["event"], message["text"].splitlines()[0]
('pause.decided', 'Pause p-1 of task t-1 decided by ana: 1 approved, 0 rejected')
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from ..store.base import PauseRecord, Store
from ..store.queries import PauseQuery
from ..values.canonical import redact
from .webhooks import DECISION_WEBHOOK_ENV, Webhook, failure_text, short_json, slack_text

__all__ = [
    "CONSOLE_URL_ENV",
    "DecisionNotifier",
    "decided_pauses",
    "decision_message",
    "decision_notice",
    "notifier_from_env",
    "pauses_waiting",
]

CONSOLE_URL_ENV = "LOOPGUARD_CONSOLE_URL"
"""The console's address, for the link in a decision's notice (none without it)."""

log = logging.getLogger("agents_loopguard.ops.decisions")
_FROM_ENV: dict[tuple[str, str], DecisionNotifier] = {}


def _iso(ts: float | None) -> str | None:
    """A stored time as ISO 8601 UTC with ``Z`` (as the operators' views show it; this module sits below them)."""
    if not ts:
        return None
    moment = dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def decision_notice(store: Store, record: PauseRecord) -> dict[str, Any]:
    """What a notice of a decision says: the pause, its task and family, who decided, when and why, the decisions,
    and each pending call's tool, operation id, arguments (redacted, decoded from the stored JSON) and decision."""
    task = store.task(record.task_id)
    calls = []
    for call in record.pending_calls:
        arguments: Any = call.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        call_id = str(call.get("call_id"))
        calls.append(
            {
                "call_id": call_id,
                "tool": call.get("tool"),
                "operation_id": call.get("operation_id"),
                "arguments": redact(arguments),
                "decision": record.decisions.get(call_id),
            }
        )
    return {
        "pause_id": record.pause_id,
        "task_id": record.task_id,
        "family": task.family if task is not None else None,
        "status": record.status,
        "decisions": dict(record.decisions),
        "decided_by": record.decided_by,
        "decided_why": record.decided_why,
        "decided_at": _iso(record.decided_at),
        "calls": calls,
    }


def decision_message(notice: Mapping[str, Any], *, console_url: str | None = None) -> dict[str, Any]:
    """The webhook body of a decision: Slack's ``text`` and ``blocks`` (attacker text escaped), and the notice's
    data under ``decision`` (with the console's link to the pause) for other receivers."""
    link = f"{console_url.rstrip('/')}/pauses/{quote(str(notice['pause_id']), safe='')}" if console_url else None
    verbs = list(notice.get("decisions", {}).values())
    head = (
        f"Pause {slack_text(str(notice['pause_id']))} of task {slack_text(str(notice['task_id']))} decided by "
        f"{slack_text(str(notice.get('decided_by')))}: {verbs.count('approve')} approved, "
        f"{verbs.count('reject')} rejected"
    )
    lines = [
        f"• {slack_text(str(c.get('decision')))} `{slack_text(str(c.get('tool')))}` "
        f"{slack_text(short_json(c.get('arguments')))}"
        for c in notice.get("calls", ())
    ]
    why = notice.get("decided_why")
    text = "\n".join([head, *lines, *([f"Note: {slack_text(str(why))}"] if why else [])])
    text += f"\n<{link}|See it in the console>" if link else ""
    return {
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
        "event": "pause.decided",
        "decision": {**notice, "console_url": link},
    }


class DecisionNotifier:
    """Post every decision on a pause to ``webhook_url``, in the background (the decision is recorded first and
    never waits for the webhook nor fails because of it). ``attempts``, ``timeout``, ``backoff``, ``headers`` and
    ``secret`` are :class:`~agents_loopguard.ops.webhooks.Webhook`'s; ``console_url`` adds the pause's link.

    >>> notifier = DecisionNotifier("https://hooks.example/decisions", console_url="https://ops.example")
    >>> notifier.webhook.host
    'hooks.example'
    """

    def __init__(
        self,
        webhook_url: str,
        *,
        console_url: str | None = None,
        attempts: int = 4,
        timeout: float = 5.0,
        backoff: float = 0.5,
        headers: Mapping[str, str] | None = None,
        secret: str | bytes | None = None,
    ) -> None:
        self.webhook = Webhook(
            webhook_url,
            attempts=attempts,
            timeout=timeout,
            backoff=backoff,
            headers=headers,
            secret=secret,
            logger=log,
        )
        self.console_url = console_url

    def __call__(self, store: Store, record: PauseRecord) -> str | None:
        """Notify the decision on ``record`` (as stored); the delivery id, or None when no notice could be made."""
        try:
            body = decision_message(decision_notice(store, record), console_url=self.console_url)
        except Exception as exc:  # the decision stands whatever happens to its notice
            log.warning("pause %s: no decision notice (%s)", record.pause_id, failure_text(exc))
            return None
        return self.webhook.send("pause.decided", f"decision on pause {record.pause_id}", body)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the deliveries in flight; True when none is left."""
        return self.webhook.drain(timeout)


def notifier_from_env() -> DecisionNotifier | None:
    """The notifier ``$LOOPGUARD_DECISION_WEBHOOK`` names (one per URL and console URL in a process), or None.
    A URL that is not http(s) is logged and ignored: a decision is never refused because of its notice."""
    url = os.environ.get(DECISION_WEBHOOK_ENV, "").strip()
    if not url:
        return None
    console = os.environ.get(CONSOLE_URL_ENV, "").strip()
    key = (url, console)
    if key not in _FROM_ENV:
        try:
            _FROM_ENV[key] = DecisionNotifier(url, console_url=console or None)
        except ValueError as exc:
            log.warning("$%s is not used: %s", DECISION_WEBHOOK_ENV, exc)
            return None
    return _FROM_ENV[key]


def decided_pauses(
    store: Store, *, tasks: Iterable[str] = (), families: Iterable[str] = (), limit: int = 100
) -> list[PauseRecord]:
    """The decided pauses not resumed yet of ``tasks`` and of the tasks of ``families`` (at least one of the two
    given), oldest first, at most ``limit``: what a resuming worker picks up.

    >>> from agents_loopguard import MemoryStore
    >>> decided_pauses(MemoryStore(), tasks=["ticket-1"])
    []
    """
    wanted_tasks, wanted_families = list(dict.fromkeys(tasks)), set(families)
    if not wanted_tasks and not wanted_families:
        raise ValueError("name the tasks or task families whose decided pauses to resume")
    found: list[PauseRecord] = []
    for task_id in wanted_tasks:
        found += store.pause_page(PauseQuery("decided", task_id, None, limit))
    if wanted_families:
        after, families_of = None, dict[str, bool]()
        while len(found) < limit:
            page = store.pause_page(PauseQuery("decided", None, after, limit))
            for pause in page:
                if pause.task_id not in families_of:
                    task = store.task(pause.task_id)
                    families_of[pause.task_id] = task is not None and task.family in wanted_families
                if families_of[pause.task_id]:
                    found.append(pause)
            if len(page) < limit:
                break
            after = (page[-1].created_at, page[-1].pause_id)
    unique = {p.pause_id: p for p in found}
    return sorted(unique.values(), key=lambda p: (p.created_at, p.pause_id))[:limit]


def pauses_waiting(store: Store, tasks: Iterable[str]) -> list[PauseRecord]:
    """The pauses of ``tasks`` still pending or decided (not resumed): what a resuming worker may still get.

    >>> from agents_loopguard import MemoryStore
    >>> pauses_waiting(MemoryStore(), ["ticket-1"])
    []
    """
    return [p for task_id in dict.fromkeys(tasks) for p in store.pauses(task_id) if p.status != "resumed"]
