"""Every row of a tenant's data names its tenant: quarantine_audit and effect_history get
tenant_id (their parent's), and every statement of the consumers' and effects' functions
filters by it. On Citus (migrations/citus.py) the tenant is what keeps a row on its
tenant's shard, beside its parent, and what routes a statement to that one shard; a
statement without it goes to every shard. _replay reads the receipt before it records a
rejection (Citus refuses a write from a function pushed down to a shard). The reader
sessions set the reader's tenant with SET LOCAL, which Citus sends on to the workers
(tracker.sql says why). consumer_begin tests for a batch without a query for one event.
"""

from handoff.migrations.helpers import apply_family, apply_frozen, sql_steps

revision = "0020_tenant_keys"
down_revision = "0019_outbox_cursor"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    _upgrade_sql()
    apply_family("consumers", revision)  # without consumer_begin's line since 0029
    apply_frozen("0030_claim_one.before.sql", revision)  # consumer_begin as of this day
    apply_family("effects", revision)
    apply_frozen("0026_effect_plans.before.sql")  # effect_record as of this day
    apply_frozen("0023_effects_by_tenant.before.sql")  # effect_claim as of this day
    apply_family("tracker")
    apply_frozen("0022_sample_by_tenant.before.sql")  # the fold and samples as of this day
    apply_family("contract", revision)  # without _micros's line since 0032
    apply_frozen("0027_emit_counts.before.sql")  # _count and _emit_contract as of this day


def downgrade() -> None:
    # The functions as 0019 has them.
    apply_frozen("0020_tenant_keys.before.sql")
    apply_frozen("0020_tenant_keys.tracker.before.sql")
    apply_frozen("0020_tenant_keys.contract.before.sql")
    _downgrade_sql()
