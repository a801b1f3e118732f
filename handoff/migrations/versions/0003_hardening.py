"""Hardening: the naming rule and deadline range in the database, owners that
must exist, credentials that can be rotated, revoked and removed.

Revision ID: 0003_hardening
Revises: 0002_tracker
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0003_hardening"
down_revision = "0002_tracker"
branch_labels = None
depends_on = None

SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    op.execute(SQL.read_text())


def downgrade() -> None:
    # The lifecycle columns stay (the upgrade adds them IF NOT EXISTS): the
    # credential checks that read them keep working, and no revocation is
    # silently undone by a downgrade.
    op.execute(
        """
        DROP FUNCTION handoff._emit;
        ALTER FUNCTION handoff._emit_checked RENAME TO _emit;
        DROP FUNCTION handoff._id_problem, handoff._label_problem, handoff._instant_problem,
                      handoff._service_lock;
        ALTER TABLE handoff.services DROP CONSTRAINT services_name_rule,
                                     DROP CONSTRAINT services_tenant_rule;
        """
    )
