"""effect_release and effect_release_for (handoff/sql/effect_release.sql): an executor
process hands back the intents it claimed ahead and never sent, as they were before the
claim, when it stops gracefully (consumers/claims.py). On Citus effect_release_for is
delegated to the tenant's worker (migrations/citus.py, DELEGATED).
"""

from handoff.migrations.helpers import apply_family, sql_steps

revision = "0028_effect_release"
down_revision = "0027_emit_counts"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    apply_family("effect_release")
    _upgrade_sql()


def downgrade() -> None:
    _downgrade_sql()
