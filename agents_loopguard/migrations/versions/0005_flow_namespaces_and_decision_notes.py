"""Activation operations move into their flow's namespace, and a pause keeps the operator's note and time (R18).

The note and the time of a pause's decisions (``decided_why``, ``decided_at``) were given and dropped; pauses decided
before this version have neither (shown as no note, no time).

Activation operations move into their flow's namespace: ``flow:<flow>:<operation id>``.

Until now a workflow's write was recorded under the id the workflow sent, so it could alias an agent task's
operation (replay it, block it, or forge its result). Every operation written by an activation's task is renamed into
that flow's namespace, and so is every reference to it: the trace, the origins of later activations, the operators'
transitions and the tasks' outcomes. The namespace is written as :func:`agents_loopguard.values.calls.flow_operation_id`
writes it (kept here as SQL: a migration keeps the format of its own time).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

MOVES = (
    "SELECT o.operation_id AS old_id, o.task_id AS task_id, "
    "'flow:' || REPLACE(REPLACE(w.flow, '%', '%25'), ':', '%3A') || ':' || o.operation_id AS new_id "
    "FROM loopguard_operations o JOIN loopguard_activations w ON w.activation_id = o.task_id"
)
"""Each activation's operation, with its id in its flow's namespace."""


def upgrade() -> None:
    op.add_column("loopguard_pauses", sa.Column("decided_why", sa.Text(), nullable=True))
    op.add_column("loopguard_pauses", sa.Column("decided_at", sa.Float(), nullable=True))
    op.execute(
        f"UPDATE loopguard_activations SET origin_operation_id = m.new_id FROM ({MOVES}) AS m "
        "WHERE loopguard_activations.origin_operation_id = m.old_id"
    )
    op.execute(
        f"UPDATE loopguard_transitions SET operation_id = m.new_id FROM ({MOVES}) AS m "
        "WHERE loopguard_transitions.operation_id = m.old_id"
    )
    op.execute(
        f"UPDATE loopguard_trace SET operation_id = m.new_id FROM ({MOVES}) AS m "
        "WHERE loopguard_trace.task_id = m.task_id AND loopguard_trace.operation_id = m.old_id"
    )
    op.execute(  # the outcome names its operation as compact JSON: "operation_id":"<id>"
        f"UPDATE loopguard_tasks SET outcome = REPLACE(outcome, '\"operation_id\":\"' || m.old_id || '\"', "
        f"'\"operation_id\":\"' || m.new_id || '\"') FROM ({MOVES}) AS m "
        "WHERE loopguard_tasks.outcome LIKE '%\"operation_id\":\"' || m.old_id || '\"%'"
    )
    op.execute(
        "UPDATE loopguard_operations SET operation_id = 'flow:' || (SELECT REPLACE(REPLACE(w.flow, '%', '%25'), ':', "
        "'%3A') FROM loopguard_activations w WHERE w.activation_id = loopguard_operations.task_id) || ':' || "
        "operation_id WHERE task_id IN (SELECT activation_id FROM loopguard_activations)"
    )
    op.execute("UPDATE loopguard_meta SET value = '5' WHERE key = 'schema_version'")


def downgrade() -> None:
    raise NotImplementedError("store migrations only go forward: restore the backup taken before migrating")
