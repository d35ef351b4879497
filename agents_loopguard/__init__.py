"""agents_loopguard: stop AI agents caught in tool loops, before execution, without losing useful state."""

import logging as _logging

from .budget import Budget, Policy
from .calls import Call, Ticket, Verdict, parse_call
from .canonical import CanonicalError, canonical_json, fingerprint, redact
from .core import Guard
from .errors import InputError, LoopguardError, NotFoundError, StateError
from .evidence import Effect, Evidence, ResultStatus
from .outcome import (
    NextAction,
    Outcome,
    Reason,
    RecordError,
    RecoveryRecord,
    Status,
    Usage,
    allowed_next_actions,
)
from .recovery import Reconciliation, RecoveryError, reconcile, recover
from .runner import create_runner
from .store import MemoryStore, OperationRecord, OperationState, Store, StoreError

__all__ = [
    "Budget",
    "Call",
    "CanonicalError",
    "Effect",
    "Evidence",
    "Guard",
    "InputError",
    "LoopguardError",
    "MemoryStore",
    "NextAction",
    "NotFoundError",
    "OperationRecord",
    "OperationState",
    "Outcome",
    "Policy",
    "Reason",
    "Reconciliation",
    "RecordError",
    "RecoveryError",
    "RecoveryRecord",
    "ResultStatus",
    "StateError",
    "Status",
    "Store",
    "StoreError",
    "Ticket",
    "Usage",
    "Verdict",
    "allowed_next_actions",
    "canonical_json",
    "create_runner",
    "fingerprint",
    "parse_call",
    "reconcile",
    "recover",
    "redact",
]

__version__ = "0.1.0"

# a library logs, the application decides where to: no output unless logging is configured
_logging.getLogger("agents_loopguard").addHandler(_logging.NullHandler())
