"""Stores: the ledger, counters, stop mark, trace and outcomes. The only place with I/O."""

from .base import (
    Grant,
    OperationClaim,
    OperationRecord,
    OperationState,
    Progress,
    Store,
    StoreError,
    TaskSnapshot,
    TraceEntry,
)
from .memory import MemoryStore

__all__ = [
    "Grant",
    "MemoryStore",
    "OperationClaim",
    "OperationRecord",
    "OperationState",
    "Progress",
    "Store",
    "StoreError",
    "TaskSnapshot",
    "TraceEntry",
]
