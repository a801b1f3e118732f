"""The tracker's read side: deadline buckets for O(owners) overdue counts, the
reader role with row-level security per tenant, and a rejections index.

Revision ID: 0002_tracker
Revises: 0001_contract
Create Date: 2026-11-29
"""

from pathlib import Path

from alembic import op

revision = "0002_tracker"
down_revision = "0001_contract"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER document_state_due_insert ON handoff.document_state;
        DROP TRIGGER document_state_due_update ON handoff.document_state;
        DROP FUNCTION handoff._due_count_trigger, handoff._due_bucket,
                      handoff.fold_due_counts, handoff.reader_session;
        DROP TABLE handoff.owner_due_counts;
        DROP POLICY tenant_reader ON handoff.document_state;
        DROP POLICY tenant_reader ON handoff.document_history;
        DROP POLICY tenant_reader ON handoff.owner_counts;
        DROP POLICY tenant_reader ON handoff.rejections;
        ALTER TABLE handoff.document_state DISABLE ROW LEVEL SECURITY;
        ALTER TABLE handoff.document_history DISABLE ROW LEVEL SECURITY;
        ALTER TABLE handoff.owner_counts DISABLE ROW LEVEL SECURITY;
        ALTER TABLE handoff.rejections DISABLE ROW LEVEL SECURITY;
        REVOKE ALL ON ALL TABLES IN SCHEMA handoff FROM handoff_reader;
        REVOKE USAGE ON SCHEMA handoff FROM handoff_reader;
        DROP INDEX handoff.rejections_by_tenant;
        """
    )
