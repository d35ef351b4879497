"""Durable engines: the guard composed with the engine's own model step, never replacing its provider (R17).

* :mod:`agents_loopguard.durable.dbos`: DBOS (``dbos`` + ``dbos-openai-agents``), extra ``agents-loopguard[dbos]``.

See ``docs/durable.md`` for what each engine guarantees, what the guard adds and which layer wraps which.
"""
