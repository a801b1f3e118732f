"""The hot path's waits: an emit counts in a free shard (a transaction-scoped advisory
lock taken without waiting), so it no longer queues behind a consumer's unit whose
backend shares its shard; and emit_direct_or_raise, the emit a unit sends without
waiting for its answer (HandoffTx.hand_on(..., wait=False)); and the handoff's UPDATE
finds its row by the key, not through the sender's queue (document_state_by_owner); and
the deadline counters' trigger fires only when a deadline is involved.
"""

from alembic import op

from handoff.migrations.helpers import VERSIONS, apply_family, apply_frozen, sql_steps

EMIT_DIRECT_ARGS = (
    "(text, text, text, text, integer, text, text, text, integer, timestamptz, jsonb, text, text)"
)

CONTRACT_FROZEN = "0020_tenant_keys.contract.before.sql"

revision = "0017_hot_path"
down_revision = "0016_broker_health"


_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    apply_family("contract", revision)
    apply_frozen(CONTRACT_FROZEN)  # _replay as of this day
    apply_frozen("0027_emit_counts.before.sql")  # _count and _emit_contract as of this day
    _upgrade_sql()  # the grant, the deadline trigger


def downgrade() -> None:
    _downgrade_sql()
    op.execute(f"DROP FUNCTION handoff.emit_direct_or_raise{EMIT_DIRECT_ARGS}")
    op.execute((VERSIONS / "0017_hot_path.before.sql").read_text())
