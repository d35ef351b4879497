"""Baseline: the schema of the first release (version 1), as its stores created it.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_COMPACT = {"sqlite_with_rowid": False}
_ORDINAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _big(name: str, **kwargs: Any) -> sa.Column[Any]:
    return sa.Column(name, sa.BigInteger(), nullable=False, **kwargs)


def _text(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.String(), nullable=nullable)


def _float(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.Float(), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "loopguard_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        _text("value"),
        **_COMPACT,
    )
    op.create_table(
        "loopguard_tasks",
        sa.Column("task_id", sa.String(), primary_key=True),
        _big("model_turns"),
        _big("tool_executions"),
        _float("deadline", nullable=True),
        _float("cost_limit", nullable=True),
        _big("models"),
        _big("tools"),
        _float("cost"),
        _big("revision"),
        _big("stalled"),
        _text("status"),
        _text("stop_reason", nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        _big("trace_seq"),
        _float("created_at"),
        _float("updated_at"),
        **_COMPACT,
    )
    op.create_table(
        "loopguard_operations",
        sa.Column("operation_id", sa.String(), primary_key=True),
        _text("task_id"),
        _text("tool"),
        _text("payload"),
        _text("state"),
        sa.Column("result", sa.Text(), nullable=True),
        _big("attempts"),
        _float("created_at"),
        _float("updated_at"),
        **_COMPACT,
    )
    op.create_index("ix_loopguard_operations_task_id", "loopguard_operations", ["task_id"])
    op.create_table(
        "loopguard_trace",
        sa.Column("task_id", sa.String(), primary_key=True),
        _big("seq", primary_key=True),
        _text("kind"),
        _text("tool", nullable=True),
        sa.Column("args", sa.Text(), nullable=True),
        _text("result_class"),
        _big("revision"),
        _big("models"),
        _big("tools"),
        _text("fingerprint", nullable=True),
        _text("operation_id", nullable=True),
        _text("operation_state", nullable=True),
        _float("at"),
        **_COMPACT,
    )
    op.create_table(
        "loopguard_repetitions",
        sa.Column("task_id", sa.String(), primary_key=True),
        sa.Column("fingerprint", sa.String(), primary_key=True),
        _big("revision", primary_key=True),
        _big("count"),
        _float("first_at"),
        **_COMPACT,
    )
    op.create_table(
        "loopguard_seen",
        sa.Column("task_id", sa.String(), primary_key=True),
        sa.Column("key", sa.String(), primary_key=True),
        **_COMPACT,
    )
    _ordered_tables()
    op.execute("INSERT INTO loopguard_meta (key, value) VALUES ('schema_version', '1')")


def _ordered_tables() -> None:
    """The tables numbered in insertion order (an auto-numbered ``ordinal``)."""
    op.create_table(
        "loopguard_activations",
        sa.Column("ordinal", _ORDINAL, primary_key=True, autoincrement=True),
        sa.Column("activation_id", sa.String(), nullable=False, unique=True),
        _text("flow"),
        _text("chain_id"),
        _big("depth"),
        _text("origin_operation_id", nullable=True),
        sa.Column("granted", sa.Boolean(), nullable=False),
        _text("reason", nullable=True),
        _float("created_at"),
    )
    op.create_index("ix_loopguard_activations_flow", "loopguard_activations", ["flow"])
    op.create_table(
        "loopguard_pauses",
        sa.Column("ordinal", _ORDINAL, primary_key=True, autoincrement=True),
        sa.Column("pause_id", sa.String(), nullable=False, unique=True),
        _text("task_id"),
        _text("status"),
        sa.Column("state", sa.Text(), nullable=False),
        _text("digest"),
        sa.Column("pending_calls", sa.Text(), nullable=False),
        _big("model_turns"),
        _big("tool_executions"),
        _float("deadline", nullable=True),
        _float("cost_limit", nullable=True),
        _big("models"),
        _big("tools"),
        _float("cost"),
        _float("created_at"),
        _float("resumed_at", nullable=True),
        _text("resumed_by", nullable=True),
        sa.Column("decisions", sa.Text(), nullable=False),
        _text("decided_by", nullable=True),
    )
    op.create_index("ix_loopguard_pauses_task_id", "loopguard_pauses", ["task_id"])
    op.create_table(
        "loopguard_transitions",
        sa.Column("ordinal", _ORDINAL, primary_key=True, autoincrement=True),
        sa.Column("transition_id", sa.String(), nullable=False, unique=True),
        _text("task_id"),
        _text("kind"),
        _text("who"),
        _text("why"),
        _float("at"),
        _text("pause_id", nullable=True),
        sa.Column("from_outcome", sa.Text(), nullable=True),
        sa.Column("decisions", sa.Text(), nullable=False),
        sa.Column("budget_delta", sa.Text(), nullable=False),
    )
    op.create_index("ix_loopguard_transitions_task_id", "loopguard_transitions", ["task_id"])


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
