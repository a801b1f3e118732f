"""Consumers: claim one event in the message that carries its handler's writes;
every SECURITY DEFINER function pins its search_path.
"""

from handoff.migrations.helpers import sql_steps

revision = "0011_claim"
down_revision = "0010_imports"

upgrade, downgrade = sql_steps(__file__)
