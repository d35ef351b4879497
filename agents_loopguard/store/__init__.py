"""Stores: the ledger, counters, stop mark, trace and outcomes. The only place with I/O."""

from typing import TYPE_CHECKING, Any

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
    WriteReservation,
)
from .memory import MemoryStore

if TYPE_CHECKING:
    from .sql import SQLStore

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
    "SQLStore",
    "Store",
    "StoreError",
    "TaskSnapshot",
    "TraceEntry",
    "TransitionRecord",
    "WriteReservation",
]


def __getattr__(name: str) -> Any:
    """``SQLStore`` is imported on first use: SQLAlchemy and SQLModel load only for programs that use it."""
    if name == "SQLStore":
        from .sql import SQLStore

        return SQLStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
