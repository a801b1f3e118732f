"""Replay: plans (manifests with revisions and approvals), per-record outcomes, skipped
capabilities, an audit trail, and the functions a running consumer records them with.
"""

from handoff.migrations.helpers import sql_steps

revision = "0009_replay"
down_revision = "0008_retention"

upgrade, downgrade = sql_steps(__file__)
