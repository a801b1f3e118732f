"""An outbox row's id is drawn after its transaction has its xid: the column's default
calls pg_current_xact_id() before nextval, so the relay's proof (handoff/relay/cursor.py)
holds for every writer of outbox rows, not only for an emit, whose first write is the
document's state row (the why is in 0031_outbox_xid_first.sql).
"""

from handoff.migrations.helpers import sql_steps

revision = "0031_outbox_xid_first"
down_revision = "0030_claim_one"

upgrade, downgrade = sql_steps(__file__)
