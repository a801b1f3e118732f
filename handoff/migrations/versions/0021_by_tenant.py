"""Entry points that name their tenant (handoff/sql/by_tenant.sql): emit_direct_for and
emit_http_for, which the clients and the API call with the tenant they learned once. On
Citus the tenant is their distribution argument (migrations/citus.py), so an emit is one
call delegated to the worker that holds the tenant.
"""

from handoff.migrations.helpers import apply_family, sql_steps

revision = "0021_by_tenant"
down_revision = "0020_tenant_keys"

_upgrade_sql, _downgrade_sql = sql_steps(__file__)


def upgrade() -> None:
    apply_family("by_tenant")
    _upgrade_sql()


def downgrade() -> None:
    _downgrade_sql()
