"""Effects: the effect ledger (intents, claims with leases, attempts, reconciliation)
and workflow runs started by consumers.
"""

from handoff.migrations.helpers import sql_steps

revision = "0005_effects"
down_revision = "0004_consumers"

upgrade, downgrade = sql_steps(__file__)
