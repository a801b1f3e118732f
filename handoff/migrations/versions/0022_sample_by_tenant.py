"""The tracker's minute samples one tenant at a time (handoff/sql/tracker.sql,
sample_owners): each statement names its tenant, so on Citus it runs on the tenant's
worker; one statement over every tenant was pushed down to each shard, where Citus
refuses the distributed queries of the function it calls. And the flow fold on Citus,
where the outbox's ids are no one sequence: it marks the rows it folded
(_fold_flow_marked, used where the outbox has folded_at: migrations/citus.py).
"""

from alembic import op

from handoff.migrations.helpers import apply_family, apply_frozen

revision = "0022_sample_by_tenant"
down_revision = "0021_by_tenant"


def upgrade() -> None:
    apply_family("citus")  # _fold_flow_marked, which fold_flow calls on Citus
    apply_family("tracker")


def downgrade() -> None:
    apply_frozen("0022_sample_by_tenant.before.sql")
    op.execute("DROP FUNCTION handoff._fold_flow_marked(integer, interval)")
