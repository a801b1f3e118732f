"""Effects: the effect ledger (intents, claims with leases, attempts, reconciliation)
and workflow runs started by consumers.

Revision ID: 0005_effects
Revises: 0004_consumers
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0005_effects"
down_revision = "0004_consumers"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP FUNCTION handoff.effect_intend, handoff.effect_claim, handoff.effect_submitting,
                      handoff.effect_record, handoff.workflow_start;
        DROP TABLE handoff.effect_history, handoff.effect_intents, handoff.workflow_runs;
        """
    )
