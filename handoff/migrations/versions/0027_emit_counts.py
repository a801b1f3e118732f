"""An emit moves its owner counts in one call and one INSERT (handoff._counts, both
owners of a handoff), and looks for a stored receipt before it calls _replay: fewer
PL/pgSQL calls and statements on every emit (the why is above _counts in
handoff/sql/contract.sql). handoff._count, the one-owner function it replaces, is dropped.
"""

from alembic import op

from handoff.migrations.helpers import apply_family, apply_frozen

revision = "0027_emit_counts"
down_revision = "0026_effect_plans"

# _count and _emit_contract as the revisions below have them, and no _counts.
FROZEN = "0027_emit_counts.before.sql"


def upgrade() -> None:
    apply_family("contract", revision)  # without _micros's line since 0032
    # Internal, as _count was (0001_contract): callable only by the schema's owner.
    op.execute("REVOKE ALL ON FUNCTION handoff._counts(text, text, text, smallint) FROM PUBLIC")
    op.execute("DROP FUNCTION handoff._count(text, text, smallint, integer)")


def downgrade() -> None:
    apply_frozen(FROZEN)
