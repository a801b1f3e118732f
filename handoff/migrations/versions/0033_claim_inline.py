"""consumer_claim_one looks the session's service up itself, as _consumer() does,
instead of calling _consumer(): one PL/pgSQL call fewer in every batch-1 unit, 3.5% of
the claim's unit (the why is in handoff/sql/claim_one.sql). Same lookup, same error.
"""

from handoff.migrations.helpers import apply_family, apply_frozen

revision = "0033_claim_inline"
down_revision = "0032_micros_inlined"

FROZEN = "0033_claim_inline.before.sql"  # consumer_claim_one as 0030 made it


def upgrade() -> None:
    apply_family("claim_one")


def downgrade() -> None:
    apply_frozen(FROZEN)
