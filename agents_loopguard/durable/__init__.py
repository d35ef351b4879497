"""Durable engines: the guard composed with the engine's own model step, never replacing its provider (R17).

* :mod:`agents_loopguard.durable.dbos`: DBOS (``dbos`` + ``dbos-openai-agents``), extra ``agents-loopguard[dbos]``.
* :mod:`agents_loopguard.durable.restate`: Restate (``restate-sdk[openai]``), extra ``agents-loopguard[restate]``.
* :mod:`agents_loopguard.durable.temporal`: Temporal (``temporalio`` + ``temporalio-openai-agents``, which pins
  openai-agents 0.22), extra ``agents-loopguard[temporal]``.

See ``docs/durable.md`` for what each engine guarantees, what the guard adds and which layer wraps which.
"""
