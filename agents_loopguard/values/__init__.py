"""The values a task's rules reason about: framework-free, I/O-free, the lowest floor of the house.

:mod:`.canonical` (call identity, RFC 8785), :mod:`.budget` (budgets and policies), :mod:`.calls` (calls, tickets,
verdicts), :mod:`.evidence` (what ``verify`` returns), :mod:`.outcome` (outcomes and recovery records),
:mod:`.pricing`, :mod:`.digests` (pause digests) and :mod:`.errors`. The store imports them; the
:class:`~agents_loopguard.Guard` in :mod:`agents_loopguard.engine` sits above the store and drives it. This package
imports nothing above itself.
"""
