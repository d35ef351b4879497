"""Webhooks, off the caller's path: one JSON body posted in the background, signed, retried a bounded number of times.

The notices of approval pauses (:class:`~agents_loopguard.sdk.notify.PauseNotifier`) and of decisions on them
(:class:`DecisionNotifier`) go through :class:`Webhook`. A failed delivery is logged (with the receiver's host only:
a Slack webhook URL is itself a secret) and dropped; the caller never waits for it and never fails because of it.

Every request carries ``X-Loopguard-Event`` (``pause.created``, ``pause.decided``), ``X-Loopguard-Delivery`` (one id
per notice, the same on every retry: a receiver drops what it has seen) and, with a secret (``secret=``, else
``$LOOPGUARD_WEBHOOK_SECRET``), ``X-Loopguard-Timestamp`` and ``X-Loopguard-Signature: v1=<hex>``, the HMAC-SHA256
of ``"<timestamp>.<body>"`` under the secret. A receiver checks it with :func:`verify_signature` (or the same three
lines in its own language) and refuses a body that is unsigned, altered, or older than five minutes.

>>> body = b'{"event": "pause.decided"}'
>>> headers = signed_headers(body, "s3cret", timestamp=1_700_000_000)
>>> headers["X-Loopguard-Signature"][:3], verify_signature(body, headers, "s3cret", now=1_700_000_060)
('v1=', True)
>>> verify_signature(body + b" ", headers, "s3cret", now=1_700_000_060)  # altered
False
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..values.canonical import redact

__all__ = [
    "DECISION_WEBHOOK_ENV",
    "WEBHOOK_SECRET_ENV",
    "Webhook",
    "drain_all",
    "short_json",
    "signed_headers",
    "slack_text",
    "verify_signature",
]

WEBHOOK_SECRET_ENV = "LOOPGUARD_WEBHOOK_SECRET"
"""The environment variable holding the secret that signs every webhook body (unsigned without it)."""
DECISION_WEBHOOK_ENV = "LOOPGUARD_DECISION_WEBHOOK"
"""The environment variable naming the URL that each decision on a pause is posted to, from any process that
records one (``loopguard approve``, the API, the console, :func:`agents_loopguard.ops.approvals.decide`)."""
TOLERANCE = 300.0
"""Seconds a signed body stays acceptable to :func:`verify_signature` (a replay older than that is refused)."""

log = logging.getLogger("agents_loopguard.ops.webhooks")
_ALL: weakref.WeakSet[Webhook] = weakref.WeakSet()
_ALL_LOCK = threading.Lock()


def _secret(secret: str | bytes | None) -> bytes | None:
    if secret is None:
        secret = os.environ.get(WEBHOOK_SECRET_ENV) or None
    if secret is None:
        return None
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def signed_headers(body: bytes, secret: str | bytes | None, *, timestamp: int | None = None) -> dict[str, str]:
    """The timestamp and signature headers for ``body`` (none without a secret, here or in the environment)."""
    key = _secret(secret)
    if key is None:
        return {}
    at = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(key, at.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Loopguard-Timestamp": at, "X-Loopguard-Signature": f"v1={digest}"}


def verify_signature(
    body: bytes,
    headers: Mapping[str, str],
    secret: str | bytes,
    *,
    tolerance: float = TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether ``body`` came signed with ``secret`` less than ``tolerance`` seconds ago (for the receiver's side;
    header names are matched without regard to case)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    at, signature = lowered.get("x-loopguard-timestamp", ""), lowered.get("x-loopguard-signature", "")
    if not at.isdigit() or not signature.startswith("v1="):
        return False
    clock = time.time() if now is None else now
    if abs(clock - int(at)) > tolerance:
        return False
    expected = signed_headers(body, secret, timestamp=int(at))["X-Loopguard-Signature"]
    return hmac.compare_digest(expected, signature)


class Webhook:
    """Posts JSON bodies to ``url`` in the background: ``attempts`` deliveries at most (a 2xx ends them; a 4xx other
    than 408/429 is not retried), ``timeout`` seconds each, ``backoff`` seconds doubling between them; signed with
    ``secret`` (else ``$LOOPGUARD_WEBHOOK_SECRET``; unsigned without one). ``headers`` are sent with every request.

    >>> Webhook("ftp://example.org")
    Traceback (most recent call last):
    ...
    ValueError: the webhook URL must be an http(s) URL
    """

    def __init__(
        self,
        url: str,
        *,
        attempts: int = 4,
        timeout: float = 5.0,
        backoff: float = 0.5,
        headers: Mapping[str, str] | None = None,
        secret: str | bytes | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the webhook URL must be an http(s) URL")
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.url = url
        self.attempts = attempts
        self.timeout = timeout
        self.backoff = backoff
        self.headers = dict(headers or {})
        self.secret = secret
        self.log = logger or log
        self.host = parts.hostname
        """What a log line may say about the receiver (its URL may be a secret)."""
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        with _ALL_LOCK:
            _ALL.add(self)

    def send(self, event: str, about: str, body: Mapping[str, Any]) -> str:
        """Post ``body`` (event ``event``, for the log ``about``) in the background; return the delivery id."""
        delivery = uuid.uuid4().hex
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str).encode()
        thread = threading.Thread(
            target=self._deliver, args=(event, about, delivery, data), name=f"webhook-{about}", daemon=True
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()
        return delivery

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the deliveries in flight; True when none is left (for scripts that exit right after)."""
        give_up = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(None if give_up is None else max(0.0, give_up - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    def _deliver(self, event: str, about: str, delivery: str, data: bytes) -> None:
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            problem = self._post(event, delivery, data)
            if problem is None:
                self.log.info("%s: notified %s (attempt %d)", about, self.host, attempt)
                return
            final = problem.startswith("refused") or attempt == self.attempts
            self.log.warning(
                "%s: notifying %s failed (attempt %d of %d): %s%s",
                about,
                self.host,
                attempt,
                self.attempts,
                problem,
                "; giving up" if final else "",
            )
            if final:
                return
            time.sleep(delay)
            delay *= 2

    def _post(self, event: str, delivery: str, data: bytes) -> str | None:
        """None when delivered; otherwise what went wrong ("refused ..." for an answer not worth retrying)."""
        import httpx  # here: the operator command starts without an HTTP client (R22) until a notice is sent

        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "X-Loopguard-Event": event,
            "X-Loopguard-Delivery": delivery,
            **signed_headers(data, self.secret),  # signed at each attempt: the timestamp is the sending time
        }
        try:
            with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
                response = client.post(self.url, content=data, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}"
        if 200 <= response.status_code < 300:
            return None
        retry = response.status_code >= 500 or response.status_code in (408, 429)
        return f"{'' if retry else 'refused: '}HTTP {response.status_code}"


def drain_all(timeout: float | None = None) -> bool:
    """Wait for every webhook delivery of this process (a command that exits right after a decision); True when
    none is left."""
    give_up = None if timeout is None else time.monotonic() + timeout
    with _ALL_LOCK:
        hooks = list(_ALL)
    done = True
    for hook in hooks:
        left = None if give_up is None else max(0.0, give_up - time.monotonic())
        done = hook.drain(left) and done
    return done


def failure_text(exc: BaseException) -> str:
    """An exception as a log line may show it (credentials redacted)."""
    return f"{type(exc).__name__}: {redact(str(exc))}"


SHOWN = 600
"""Characters of one call's arguments shown in a Slack text (the full, redacted arguments are in the body's data)."""


def slack_text(text: str) -> str:
    """Text escaped for Slack's markup: no link, mention or formatting can come from it.

    >>> slack_text("<!channel> & <https://evil.example|click>")
    '&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;'
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def short_json(value: Any) -> str:
    """A value as JSON text of at most :data:`SHOWN` characters."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."
