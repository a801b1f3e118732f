"""Web UI sessions: an opaque id in the cookie (only its hash stored) instead of the
service credential; one-time operate forms.
"""

from handoff.migrations.helpers import sql_steps

revision = "0014_ui_sessions"
down_revision = "0013_deliveries"

upgrade, downgrade = sql_steps(__file__)
