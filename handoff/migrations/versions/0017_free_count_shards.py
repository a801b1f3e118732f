"""Owner counts in a free shard: an emit counts in the first shard no other transaction
is counting in (a transaction-scoped advisory lock, taken without waiting), so an API
emit no longer queues behind a consumer's unit whose backend shares its shard.
"""

from alembic import op

from handoff.migrations.helpers import apply_family, function_from

revision = "0017_free_count_shards"
down_revision = "0016_broker_health"


def upgrade() -> None:
    apply_family("contract")


def downgrade() -> None:
    op.execute(function_from("0001_contract.sql", "_count"))
