"""Replay: plans (manifests with revisions and approvals), per-record outcomes, skipped
capabilities, an audit trail, and the functions a running consumer records them with.

Revision ID: 0009_replay
Revises: 0008_retention
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0009_replay"
down_revision = "0008_retention"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP FUNCTION IF EXISTS handoff.replay_record, handoff.replay_skip, handoff.replay_stopping,
                      handoff._replay_mine;
        DROP TABLE handoff.replay_audit, handoff.replay_skipped, handoff.replay_items,
                   handoff.replay_plans;
        """
    )
