"""The per-event entry points price sequential scans out (SET enable_seqscan = off), so
that a session which first plans them on an empty or just-vacuumed table keeps index
plans as the table grows (the why is above consumer_begin in handoff/sql/consumers.sql).
"""

from alembic import op

from handoff.migrations.helpers import apply_family

revision = "0018_index_plans"
down_revision = "0017_hot_path"

EMIT_ARGS = (
    "text, text, text, text, integer, text, text, text, integer, timestamptz, jsonb, text, text"
)
# Every function the revision sets it on, as ALTER FUNCTION names it.
FUNCTIONS = (
    "consumer_begin(jsonb, text[], text, boolean)",
    "consumer_receive(text, jsonb)",
    f"emit_direct({EMIT_ARGS})",
    f"emit_http(text, bytea, {EMIT_ARGS})",
    "effect_intend(text, text, text, integer, jsonb, text)",
    "effect_claim(text, double precision, integer, boolean)",
    "effect_submitting(bigint, integer)",
    "effect_record(bigint, integer, text, text, text, jsonb, text, double precision, boolean, "
    "text)",
)


def upgrade() -> None:
    for family in ("consumers", "contract", "effects"):
        apply_family(family)


def downgrade() -> None:
    for function in FUNCTIONS:
        op.execute(f"ALTER FUNCTION handoff.{function} RESET enable_seqscan")
