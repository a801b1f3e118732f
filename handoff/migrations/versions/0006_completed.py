"""Completed work: finished documents, newest first, and found by id prefix.

Two partial indexes over finished documents only (owner IS NULL), so the
waiting work's indexes and its writes are untouched; built CONCURRENTLY, so
a live system keeps accepting handoffs while a large table is indexed.
"""

from alembic import op

revision = "0006_completed"
down_revision = "0005_effects"

INDEXES = (
    # Newest completion first: a keyset page is one index range.
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS document_state_completed
           ON handoff.document_state (tenant_id, completed_at DESC, document_id DESC)
        WHERE owner IS NULL""",
    # An id prefix as a range in byte order, whatever the database's collation.
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS document_state_completed_by_id
           ON handoff.document_state (tenant_id, (document_id COLLATE "C"), run_id)
        WHERE owner IS NULL""",
)


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for statement in INDEXES:
            op.execute(statement)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS handoff.document_state_completed")
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS handoff.document_state_completed_by_id")
