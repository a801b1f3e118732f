"""The handoff contract: state, history, sharded owner counts, receipts, outbox,
rejections, services, and the emit functions.

Revision ID: 0001_contract
Revises:
Create Date: 2026-11-29
"""

from pathlib import Path

from alembic import op

revision = "0001_contract"
down_revision = None
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # The DDL and the PL/pgSQL live beside this file as plain SQL: partial
    # indexes, grants and server-side functions read best as what they are.
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute("DROP SCHEMA handoff CASCADE")
