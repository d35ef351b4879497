"""The policies the corpus is scored under."""

from __future__ import annotations

from agents_loopguard import Policy

try:
    LEGACY = Policy(max_polls=10, max_wait=None, max_unverified=16, max_cycle=0, max_failures=0, retry_transient=False)  # type: ignore[call-arg]
except TypeError:
    LEGACY = Policy()
POLICIES = {"default": Policy(), "legacy": LEGACY}
