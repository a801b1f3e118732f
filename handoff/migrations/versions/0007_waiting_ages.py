"""Waiting ages: per-owner counts of waiting documents per assignment hour, so the
p50/p90/max age of an owner's work is read in O(hours), not O(documents).

Revision ID: 0007_waiting_ages
Revises: 0006_completed
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0007_waiting_ages"
down_revision = "0006_completed"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER document_state_assigned_insert ON handoff.document_state;
        DROP TRIGGER document_state_assigned_update ON handoff.document_state;
        DROP FUNCTION handoff._assigned_count_trigger, handoff.fold_assigned_counts;
        DROP TABLE handoff.owner_assigned_counts;
        """
    )
