"""The tracker's minute samples one tenant at a time (handoff/sql/tracker.sql,
sample_owners): each statement names its tenant, so on Citus it runs on the tenant's
worker; one statement over every tenant was pushed down to each shard, where Citus
refuses the distributed queries of the function it calls. And the flow fold on Citus,
where the outbox's ids are no one sequence: it marks the rows it folded
(_fold_flow_marked, used where the outbox has folded_at: migrations/citus.py).
"""

from handoff.migrations.helpers import apply_family, apply_frozen, sql_steps

revision = "0022_sample_by_tenant"
down_revision = "0021_by_tenant"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    _upgrade_sql()  # _fold_flow_marked, which fold_flow calls on Citus
    apply_family("tracker")


def downgrade() -> None:
    apply_frozen("0022_sample_by_tenant.before.sql")
    _downgrade_sql()
