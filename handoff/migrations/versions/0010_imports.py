"""Imports: the resumable position of each scan segment of a port from DynamoDB."""

from handoff.migrations.helpers import sql_steps

revision = "0010_imports"
down_revision = "0009_replay"

upgrade, downgrade = sql_steps(__file__)
