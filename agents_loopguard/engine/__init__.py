"""The engine: the :class:`~agents_loopguard.Guard` that applies a task's rules on the store's atomic steps.

:mod:`.core` (the call cycle), :mod:`.metering` (a request's tokens and cost), :mod:`.ending` (pauses and the end)
and the article's runner in :mod:`.runner`. It sits above the store, which it drives, and above
:mod:`agents_loopguard.values`, the values it reasons about; it imports no framework.
"""
