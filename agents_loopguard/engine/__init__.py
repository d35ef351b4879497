"""The engine: a task's rules, framework-free.

Two floors, every import pointing down: the *values* (:mod:`.canonical`, :mod:`.budget`, :mod:`.calls`,
:mod:`.evidence`, :mod:`.outcome`, :mod:`.pricing`, :mod:`.digests`, :mod:`.errors`) sit below the store, which
imports them; the :class:`~agents_loopguard.Guard` (:mod:`.core`, :mod:`.metering`, and the article's
runner in :mod:`.runner`) sits above the store, which it drives. This package imports nothing itself, so the store
can import the values without pulling in the guard.
"""
