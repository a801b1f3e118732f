"""The W3C trace context of the unit that wrote a handoff's rows (telemetry/tracing.py):
history, outbox and effect intents take the transaction's ``handoff.trace`` setting as
their default, so the trace commits with the handoff, the relay sends it on, and the
executor continues it (effect_traces, handoff/sql/trace.sql). Unset (tracing off), the
rows hold NULL.
"""

from alembic import op

from handoff.migrations.helpers import apply_family, sql_steps

revision = "0025_trace"
down_revision = "0024_effect_pending"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    _upgrade_sql()  # the columns first: the family's function reads one
    apply_family("trace")
    op.execute(
        "REVOKE ALL ON FUNCTION handoff.effect_traces FROM PUBLIC;"
        "GRANT EXECUTE ON FUNCTION handoff.effect_traces TO handoff_service"
    )


def downgrade() -> None:
    _downgrade_sql()
