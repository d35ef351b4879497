"""Tell people a run waits for them: post each new approval pause to a webhook (Slack-compatible), off the run's path.

:class:`PauseNotifier` is an ``on_pause`` hook for the guarded entry points. It first stores the pause as the
default does (:func:`~agents_loopguard.sdk.persist_pause`), then posts the pause id, the task, each pending call's
tool and redacted arguments (as stored with the pause), and the console link, from a background thread with bounded
retries, through the same :class:`~agents_loopguard.ops.webhooks.Webhook` as the decisions' notices (signed with
``$LOOPGUARD_WEBHOOK_SECRET`` or ``secret=``). The run never waits for the webhook and never fails because of it: a
failed delivery is logged (with the webhook's host only: a Slack webhook URL is itself a secret) and dropped.

The body has Slack's ``text`` and ``blocks`` (attacker text escaped for Slack's markup, so a tool argument cannot
make a link or an ``@channel``), and the same data as fields under ``pause`` for other receivers (n8n, a pager)::

    notifier = PauseNotifier("https://hooks.slack.com/services/...", console_url="https://loopguard.internal")
    outcome = run_guarded_sync(agent, "...", budget=..., store=store, task_id="ticket-981", on_pause=notifier)
    notifier.drain(timeout=10)   # a short script: let the delivery finish before the process exits

>>> message = pause_message({"pause_id": "p-1", "task_id": "t-1", "calls": [
...     {"call_id": "c1", "tool": "refund", "operation_id": "refund-42", "arguments": {"note": "<!channel>"}}]},
...     console_url="https://ops.example/")
>>> message["pause"]["console_url"], "&lt;!channel&gt;" in message["text"]
('https://ops.example/pauses/p-1', True)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from ..ops.operator import pause_notice
from ..ops.webhooks import Webhook, short_json, slack_text
from ..store.base import Store
from ..values.canonical import redact

__all__ = ["PauseNotifier", "pause_message"]

log = logging.getLogger("agents_loopguard.sdk.notify")


def pause_message(pause: Mapping[str, Any], *, console_url: str | None = None) -> dict[str, Any]:
    """The webhook body for ``pause`` (``pause_id``, ``task_id``, ``calls``: tool, call_id, operation_id, arguments)."""
    link = f"{console_url.rstrip('/')}/pauses/{quote(str(pause['pause_id']), safe='')}" if console_url else None
    calls = [dict(call) for call in pause.get("calls", ())]
    lines = [
        f"• `{slack_text(str(c.get('tool')))}` {slack_text(short_json(c.get('arguments')))}"
        + (f" (operation `{slack_text(str(c['operation_id']))}`)" if c.get("operation_id") else "")
        for c in calls
    ]
    head = (
        f"Task {slack_text(str(pause['task_id']))} waits for approval "
        f"({len(calls)} call{'s' if len(calls) != 1 else ''})"
    )
    text = head + ":\n" + "\n".join(lines) + (f"\n<{link}|Decide in the console>" if link else "")
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    return {
        "text": text,
        "blocks": blocks,
        "event": "pause.created",
        "pause": {
            "pause_id": pause["pause_id"],
            "task_id": pause["task_id"],
            "calls": calls,
            "console_url": link,
        },
    }


class PauseNotifier:
    """An ``on_pause`` hook: store the pause, then post it to ``webhook_url`` in the background.

    ``attempts`` deliveries at most (a 2xx ends them; a 4xx other than 408/429 is not retried), ``timeout`` seconds
    each, ``backoff`` seconds doubling between them; signed with ``secret`` (else ``$LOOPGUARD_WEBHOOK_SECRET``,
    see :mod:`agents_loopguard.ops.webhooks`). ``persist`` is the hook that stores the pause (default
    :func:`~agents_loopguard.sdk.persist_pause`); it runs first, in the run, and its errors are the run's.
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
        persist: Callable[[Any, Any], Any] | None = None,
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
        self.webhook_url = webhook_url
        self.console_url = console_url
        self.persist = persist

    def __call__(self, result: Any, guard: Any) -> str | None:
        """The ``on_pause`` hook: store the pause (in the run), then notify (in the background)."""
        persist = self.persist
        if persist is None:
            from . import persist_pause

            persist = persist_pause
        pause_id = persist(result, guard)
        if isinstance(pause_id, str):
            self.notify(guard.store, pause_id)
            return pause_id
        return None

    def notify(self, store: Store, pause_id: str) -> None:
        """Post the stored pause ``pause_id`` in the background; never raises (a failure is logged)."""
        try:
            body = pause_message(pause_notice(store, pause_id), console_url=self.console_url)
        except Exception as exc:  # the run goes on whatever happens to its notification
            log.warning("pause %s: no notification (%s: %s)", pause_id, type(exc).__name__, redact(str(exc)))
            return
        self.webhook.send("pause.created", f"pause {pause_id}", body)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the deliveries in flight; True when none is left (for scripts that exit right after a run)."""
        return self.webhook.drain(timeout)
