"""effect_pending(): a service's open effect intents by state and those waiting for a
person (handoff/sql/metrics.sql), read by its executors for their metrics (handoff_effects_open,
handoff_effects_unresolved) and so for the dashboard and the alert rules in deploy/.
"""

from handoff.migrations.helpers import apply_family, sql_steps

revision = "0024_effect_pending"
down_revision = "0023_effects_by_tenant"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    apply_family("metrics")
    _upgrade_sql()


def downgrade() -> None:
    _downgrade_sql()
