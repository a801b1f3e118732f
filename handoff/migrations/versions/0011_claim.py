"""Consumers: claim one event in the message that carries its handler's writes;
every SECURITY DEFINER function pins its search_path.

Revision ID: 0011_claim
Revises: 0010_imports
Create Date: 2026-12-01
"""

from pathlib import Path

from alembic import op

revision = "0011_claim"
down_revision = "0010_imports"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    op.execute("DROP FUNCTION handoff.consumer_claim(jsonb, text[], text)")
    for function in ("reader_session(text, bytea)", "reader_services()", "relay_backlog(integer)"):
        op.execute(f"ALTER FUNCTION handoff.{function} RESET search_path")
