"""agents_loopguard: stop AI agents caught in tool loops, before execution, without losing useful state.

The names a newcomer needs; the rest lives in its layer: :mod:`agents_loopguard.engine` (a task's rules),
:mod:`agents_loopguard.run` (the guarded run every adapter drives), :mod:`agents_loopguard.ops` (what operators
do), the adapters :mod:`agents_loopguard.sdk` and :mod:`agents_loopguard.function_calling`, and
:mod:`agents_loopguard.store`.
"""

import logging as _logging

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
