"""Function families: each family's functions in one file (handoff/sql) that holds
today's definitions; 0001's emit body, renamed _emit_checked by 0003, is _emit_contract.
"""

from alembic import op

from handoff.migrations.helpers import VERSIONS, apply_family, apply_frozen, function_from

CONTRACT_FROZEN = "0020_tenant_keys.contract.before.sql"

revision = "0015_function_families"
down_revision = "0014_ui_sessions"

# Why the new name: 0003 put _emit's checks in front of 0001's emit body and
# renamed the body after when it runs ("checked"); it is the contract's rules.
EMIT_BODY = (
    "handoff.{}(text, text, boolean, text, text, text, text, text, integer, text, text,"
    " integer, timestamptz, jsonb, text, text)"
)
# The arguments of emit_direct (and of 0017's emit_direct_or_raise).
EMIT_DIRECT_ARGS = (
    "(text, text, text, text, integer, text, text, text, integer, timestamptz, jsonb, text, text)"
)


def upgrade() -> None:
    op.execute(f"ALTER FUNCTION {EMIT_BODY.format('_emit_checked')} RENAME TO _emit_contract")
    # _emit now calls _emit_contract; emit_direct's comment no longer points
    # "below" (_consumer is in consumers.sql); every other definition is as it was.
    apply_family("contract", revision)
    apply_frozen(CONTRACT_FROZEN)  # _replay as of this day
    apply_frozen("0027_emit_counts.before.sql")  # no _counts yet
    # Frozen as of this revision's day: what 0017 changed as it was, and not yet
    # 0017's new function.
    op.execute((VERSIONS / "0017_hot_path.before.sql").read_text())
    op.execute(f"DROP FUNCTION handoff.emit_direct_or_raise{EMIT_DIRECT_ARGS}")


def downgrade() -> None:
    op.execute(f"ALTER FUNCTION {EMIT_BODY.format('_emit_contract')} RENAME TO _emit_checked")
    op.execute(function_from("0003_hardening.sql", "_emit"))
    op.execute(function_from("0004_consumers.sql", "emit_direct"))  # its comments
