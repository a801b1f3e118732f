"""The tracker's read side: deadline buckets for O(owners) overdue counts, the
reader role with row-level security per tenant, and a rejections index.
"""

from handoff.migrations.helpers import sql_steps

revision = "0002_tracker"
down_revision = "0001_contract"

upgrade, downgrade = sql_steps(__file__)
