"""Imports: the resumable position of each scan segment of a port from DynamoDB.

Revision ID: 0010_imports
Revises: 0009_replay
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0010_imports"
down_revision = "0009_replay"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute("DROP TABLE handoff.import_progress")
