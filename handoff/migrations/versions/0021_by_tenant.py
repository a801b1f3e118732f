"""Entry points that name their tenant (handoff/sql/by_tenant.sql): the emits and every
call of a consumer's unit, which clients, the API and consumers call with the tenant they
learned once. On Citus the tenant is their distribution argument (migrations/citus.py), so
each call is handed whole to the worker that holds the tenant, inside a unit too. _emit
checks an unknown next owner in two statements (one only routed by its tenant).
"""

from handoff.migrations.helpers import apply_family, apply_frozen, sql_steps

revision = "0021_by_tenant"
down_revision = "0020_tenant_keys"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    # The contract's _emit as of this revision; 0020 applies the same file, so a
    # downgrade leaves it (the two statements behave as the one did).
    apply_family("contract", revision)  # without _micros's line since 0032
    apply_frozen("0027_emit_counts.before.sql")  # _count and _emit_contract as of this day
    apply_family("by_tenant")
    _upgrade_sql()


def downgrade() -> None:
    _downgrade_sql()
