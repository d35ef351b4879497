"""agents_loopguard: stop AI agents caught in tool loops, before execution, without losing useful state.

The names a newcomer needs; the rest lives in its layer: :mod:`agents_loopguard.engine` (a task's rules),
:mod:`agents_loopguard.run` (the guarded run every adapter drives), :mod:`agents_loopguard.ops` (what operators
do), the adapters :mod:`agents_loopguard.sdk` and :mod:`agents_loopguard.function_calling`, and
:mod:`agents_loopguard.store`.
"""

import importlib as _importlib
import logging as _logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below load on first use (PEP 562): `import agents_loopguard` loads no framework
    from .engine.core import Guard
    from .engine.runner import create_runner
    from .ops.recovery import reconcile, recover
    from .run.guarded import GuardStopped
    from .run.options import RunOptions
    from .store import MemoryStore, OperationState, Store, StoreError
    from .values.budget import Budget, Policy
    from .values.calls import Verdict
    from .values.canonical import canonical_json
    from .values.errors import InputError, LoopguardError, NotFoundError, StateError
    from .values.evidence import Effect, Evidence
    from .values.outcome import Outcome, Reason, RecoveryRecord, Status, Usage

_WHERE = {
    "Guard": ".engine.core",
    "create_runner": ".engine.runner",
    "reconcile": ".ops.recovery",
    "recover": ".ops.recovery",
    "GuardStopped": ".run.guarded",
    "RunOptions": ".run.options",
    "MemoryStore": ".store",
    "OperationState": ".store",
    "Store": ".store",
    "StoreError": ".store",
    "Budget": ".values.budget",
    "Policy": ".values.budget",
    "Verdict": ".values.calls",
    "canonical_json": ".values.canonical",
    "InputError": ".values.errors",
    "LoopguardError": ".values.errors",
    "NotFoundError": ".values.errors",
    "StateError": ".values.errors",
    "Effect": ".values.evidence",
    "Evidence": ".values.evidence",
    "Outcome": ".values.outcome",
    "Reason": ".values.outcome",
    "RecoveryRecord": ".values.outcome",
    "Status": ".values.outcome",
    "Usage": ".values.outcome",
}
"""Where each public name lives: imported when first asked for, so the ``loopguard`` command and a program that
needs only the store never load the Agents SDK or the OpenAI client."""


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


__all__ = [
    "Budget",
    "Effect",
    "Evidence",
    "Guard",
    "GuardStopped",
    "InputError",
    "LoopguardError",
    "MemoryStore",
    "NotFoundError",
    "OperationState",
    "Outcome",
    "Policy",
    "Reason",
    "RecoveryRecord",
    "RunOptions",
    "StateError",
    "Status",
    "Store",
    "StoreError",
    "Usage",
    "Verdict",
    "canonical_json",
    "create_runner",
    "reconcile",
    "recover",
]

__version__ = "0.1.0"

# a library logs, the application decides where to: no output unless logging is configured
_logging.getLogger("agents_loopguard").addHandler(_logging.NullHandler())
