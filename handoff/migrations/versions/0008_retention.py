"""Retention: how long receipts, guards, published outbox rows, rejections and closed
quarantine entries are kept, configured with the replay window (never shorter).

Revision ID: 0008_retention
Revises: 0007_flow
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0008_retention"
down_revision = "0007_flow"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX handoff.receipts_by_age, handoff.consumer_guards_by_age,
                   handoff.rejections_by_age, handoff.quarantine_closed_by_age;
        DROP TABLE handoff.retention;
        """
    )
