"""Web UI sessions: an opaque id in the cookie (only its hash stored) instead of the
service credential; one-time operate forms.

Revision ID: 0014_ui_sessions
Revises: 0013_deliveries
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0014_ui_sessions"
down_revision = "0013_deliveries"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION handoff.ui_session_open, handoff.ui_reader_session, handoff.ui_session;"
        "DROP TABLE handoff.ui_form_uses, handoff.ui_sessions"
    )
