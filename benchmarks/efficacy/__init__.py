"""The efficacy benchmark: a labelled corpus of agent trajectories (legitimate work and loops), the paths that run
them through the guard, and the scores (precision, recall, false-stop rate, executions wasted and saved).

- :mod:`.world`: the receivers the corpus's tools talk to (search index, records, orders, jobs, listings, queues),
  deterministic, with the application's trusted ``verify`` and a fake clock;
- :mod:`.corpus`: the trajectories, generated from a seed (``build()``), each labelled ``loop`` or ``legit`` with its
  shape;
- :mod:`.paths`: one trajectory through the engine (``Guard``), the raw function-calling loop over HTTP, the Agents
  SDK with ``ScriptedModel``, LangChain and Google ADK;
- :mod:`.score`: what the runs come to, and the figures;
- ``run.py``: the command that prints them (``python benchmarks/efficacy/run.py --help``).
"""
