"""consumer_claim_one and consumer_claim_one_for (handoff/sql/claim_one.sql): a batch-1
unit claims its one event with scalar arguments instead of a JSON array read through
consumer_begin's verdicts, a cheaper guard for the same verdicts. The one-event guard
(_guard_one) is consumer_begin's one-at-a-time path too, so each verdict is decided in
one place. On Citus consumer_claim_one_for is delegated to the tenant's worker
(migrations/citus.py, DELEGATED).
"""

from handoff.migrations.helpers import apply_family, apply_frozen, sql_steps

revision = "0030_claim_one"
down_revision = "0029_position_plans"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    apply_family("claim_one")
    apply_frozen("0033_claim_inline.before.sql")  # consumer_claim_one as of this day
    apply_family("consumers")
    _upgrade_sql()


def downgrade() -> None:
    apply_frozen("0030_claim_one.before.sql")  # consumer_begin without _guard_one
    _downgrade_sql()
