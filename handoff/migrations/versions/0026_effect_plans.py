"""The executor's ledger calls keep index plans when the statistics are stale: effect_claim
runs with sorts priced out (SET enable_sort = off; both its queries have an index in
their order), and effect_submitting and effect_record find the intent by its key alone
and check its claim, owner and state on the row. A burst of intents, written before
autovacuum's next ANALYZE, had the claim sort and the record walk the consumer's every
intent (the why is above each function in handoff/sql/effects.sql).
"""

from handoff.migrations.helpers import apply_family, apply_frozen

revision = "0026_effect_plans"
down_revision = "0025_trace"

# effect_submitting and effect_record as the revisions below have them.
FROZEN = "0026_effect_plans.before.sql"


def upgrade() -> None:
    apply_family("effects")


def downgrade() -> None:
    apply_family("effects", down_revision)  # effect_claim without the line since 0026
    apply_frozen(FROZEN)
