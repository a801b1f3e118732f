"""Flow over time: changes of owner per minute, the edges the stage order is
learned from, minute samples of each owner's waiting work, and the folds
that keep them (run by the tracker, not by emits).

Revision ID: 0007_flow
Revises: 0006_completed
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0007_flow"
down_revision = "0006_completed"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP POLICY IF EXISTS tenant_reader ON handoff.quarantine;
        DROP POLICY IF EXISTS tenant_reader ON handoff.effect_intents;
        ALTER TABLE handoff.quarantine DISABLE ROW LEVEL SECURITY;
        ALTER TABLE handoff.effect_intents DISABLE ROW LEVEL SECURITY;
        REVOKE SELECT ON handoff.quarantine, handoff.effect_intents FROM handoff_reader;
        DROP FUNCTION IF EXISTS handoff.fold_flow, handoff.sample_owners, handoff.owner_waiting,
                      handoff.relay_backlog, handoff.reader_services;
        DROP TABLE handoff.flow_minutes, handoff.flow_edges, handoff.owner_samples,
                   handoff.flow_fold, handoff.flow_gaps;
        """
    )
