"""An append-only outbox: each relay slot keeps how far its rows are published
(handoff.relay_cursors) instead of the relay marking every row, and what is still
waiting is the view handoff.outbox_pending.
"""

from alembic import op

from handoff.migrations.helpers import apply_family, apply_frozen, function_from, sql_steps

revision = "0019_outbox_cursor"
down_revision = "0018_index_plans"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    _upgrade_sql()
    apply_family("tracker")  # relay_backlog reads the view
    apply_frozen("0022_sample_by_tenant.before.sql")  # the fold and samples as of this day
    apply_frozen("0020_tenant_keys.tracker.before.sql")  # the readers as of this day


def downgrade() -> None:
    _downgrade_sql()  # published_at back first: 0007's function body reads it
    op.execute(function_from("0007_flow.sql", "relay_backlog"))
    op.execute("ALTER FUNCTION handoff.relay_backlog(integer) SET search_path = handoff, pg_temp")
