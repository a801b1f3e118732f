"""Consumers: an event of a batch that stopped its process starts its own count with that
stop, so a crashing handler runs max_deliveries times, not twice that.
"""

from alembic import op

from handoff.migrations.helpers import function_from, sql_beside

revision = "0013_deliveries"
down_revision = "0012_lag_samples"

upgrade = sql_beside(__file__)


def downgrade() -> None:
    # 0004's body: every count starts from one.
    op.execute(function_from("0004_consumers.sql", "consumer_receive"))
