"""Retention: how long receipts, guards, published outbox rows, rejections and closed
quarantine entries are kept, configured with the replay window (never shorter).
"""

from handoff.migrations.helpers import sql_steps

revision = "0008_retention"
down_revision = "0007_flow"

upgrade, downgrade = sql_steps(__file__)
