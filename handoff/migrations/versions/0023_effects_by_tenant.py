"""The effect executor's calls naming their tenant (handoff/sql/effects_by_tenant.sql):
effect_claim_for, effect_submitting_for and effect_record_for, for services only. On Citus
they are delegated to the tenant's worker (migrations/citus.py, DELEGATED), as the emits
and the consumer's unit are: each call one round trip and one local transaction there.
effect_claim takes its intents one at a time in statements that each name the tenant
(as one CTE chain, Citus sent its intermediate rows to every node).
"""

from handoff.migrations.helpers import apply_family, apply_frozen, sql_steps

revision = "0023_effects_by_tenant"
down_revision = "0022_sample_by_tenant"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    apply_family("effects", revision)
    apply_frozen("0026_effect_plans.before.sql")  # submitting and record as of this day
    apply_family("effects_by_tenant")
    _upgrade_sql()


def downgrade() -> None:
    _downgrade_sql()
    apply_frozen("0023_effects_by_tenant.before.sql")
