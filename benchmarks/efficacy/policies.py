"""The policies the corpus is scored under: ``Policy()``, the defaults before the efficacy work (``legacy``), and
the article's prototype's rules (``prototype``)."""

from __future__ import annotations

from agents_loopguard import Policy

LEGACY = Policy(max_polls=10, max_wait=None, max_unverified=16, max_cycle=0, max_failures=0, retry_transient=False)
"""``Policy()`` before the efficacy work: the prototype's rules, ten polls, no wait bound, 16 unverified reads."""
POLICIES = {"default": Policy(), "legacy": LEGACY, "prototype": Policy.prototype()}
