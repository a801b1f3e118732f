"""Consumers: the duplicate guard, per-document positions, the quarantine and
parked events, behind functions that take the consumer from the session.

Revision ID: 0004_consumers
Revises: 0003_hardening
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0004_consumers"
down_revision = "0003_hardening"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    # emit_direct keeps its 0004 body: the same rules, only its service
    # lookup uses the index.
    op.execute(
        """
        DROP FUNCTION handoff.consumer_receive, handoff.consumer_whoami,
                      handoff.consumer_begin, handoff.consumer_hold, handoff.consumer_due,
                      handoff.consumer_take, handoff.consumer_pending, handoff._consumer;
        DROP TABLE handoff.consumer_deliveries, handoff.consumer_parked,
                   handoff.quarantine_audit, handoff.quarantine, handoff.consumer_guards;
        """
    )
