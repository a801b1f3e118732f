"""Consumers: the duplicate guard, per-document positions, the quarantine and
parked events, behind functions that take the consumer from the session.
"""

from handoff.migrations.helpers import sql_steps

revision = "0004_consumers"
down_revision = "0003_hardening"

upgrade, downgrade = sql_steps(__file__)
