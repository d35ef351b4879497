"""``loopguard serve``: a versioned HTTP JSON API (``/api/v1``) and a server-rendered web console for operators.

Needs the ``server`` extra (``pip install 'agents-loopguard[server]'``: FastAPI, Uvicorn, Jinja2,
python-multipart, prometheus-client). Everything an operator sees or does goes through
:mod:`agents_loopguard.ops.operator`, so the command line, the API and the console show the same data and refuse the
same things; ``GET /metrics`` exports the operations layer's measures for Prometheus
(:mod:`agents_loopguard.server.metrics`); trigger activations for workflows that are not Python go through
:class:`~agents_loopguard.ops.triggers.TriggerGuard` (:mod:`agents_loopguard.ops.workflows`). See ``docs/server.md``.

>>> from agents_loopguard import MemoryStore
>>> from agents_loopguard.server import ServerConfig, Tokens, create_app
>>> app = create_app(MemoryStore(), ServerConfig(tokens=Tokens.parse("ana:operator:correct-horse-battery-staple")))
>>> app.openapi()["info"]["version"]
'1'
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401 - imported for the clear error below
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError("agents_loopguard.server needs the server extra: pip install 'agents-loopguard[server]'") from exc

from .app import create_app
from .config import ConfigError, Principal, ServerConfig, Tokens

__all__ = ["ConfigError", "Principal", "ServerConfig", "Tokens", "create_app"]
