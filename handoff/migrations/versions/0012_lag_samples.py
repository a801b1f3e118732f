"""Consumer lag sampled into the database by a child process of the tracker.

Revision ID: 0012_lag_samples
Revises: 0011_claim
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0012_lag_samples"
down_revision = "0011_claim"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute("DROP TABLE handoff.lag_sampler, handoff.consumer_lag")
