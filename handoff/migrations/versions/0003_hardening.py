"""Hardening: the naming rule and deadline range in the database, owners that
must exist, credentials that can be rotated, revoked and removed.
"""

from handoff.migrations.helpers import sql_steps

revision = "0003_hardening"
down_revision = "0002_tracker"

upgrade, downgrade = sql_steps(__file__)
