"""Consumers: an event of a batch that stopped its process starts its own count with that
stop, so a crashing handler runs max_deliveries times, not twice that.

Revision ID: 0013_deliveries
Revises: 0012_lag_samples
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0013_deliveries"
down_revision = "0012_lag_samples"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    # 0004's body: every count starts from one.
    text = (Path(__file__).parent / "0004_consumers.sql").read_text()
    start = text.index("CREATE FUNCTION handoff.consumer_receive")
    end = text.index("$$;", text.index("AS $$", start)) + 3
    op.execute(text[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
