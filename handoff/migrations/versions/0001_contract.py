"""The handoff contract: state, history, sharded owner counts, receipts, outbox,
rejections, services, and the emit functions.
"""

from handoff.migrations.helpers import sql_steps

revision = "0001_contract"
down_revision = None

# The DDL and the PL/pgSQL live beside this file as plain SQL: partial
# indexes, grants and server-side functions read best as what they are.
upgrade, downgrade = sql_steps(__file__)
