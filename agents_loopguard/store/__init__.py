"""Stores: the ledger, counters, stop mark, trace and outcomes. The only place with I/O."""

from .base import (
    Activation,
    Grant,
    OperationClaim,
    OperationRecord,
    OperationState,
    PauseAlreadyResumed,
    PauseRecord,
    Progress,
    Store,
    StoreError,
    TaskSnapshot,
    TraceEntry,
    TransitionRecord,
)
from .memory import MemoryStore

__all__ = [
    "Activation",
    "Grant",
    "MemoryStore",
    "OperationClaim",
    "OperationRecord",
    "OperationState",
    "PauseAlreadyResumed",
    "PauseRecord",
    "Progress",
    "Store",
    "StoreError",
    "TaskSnapshot",
    "TraceEntry",
    "TransitionRecord",
]
