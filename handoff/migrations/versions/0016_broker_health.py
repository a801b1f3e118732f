"""Broker health beside consumer lag: the sampler records which brokers answer, which
are missing, and how many partitions are under-replicated or offline.
"""

from handoff.migrations.helpers import sql_steps

revision = "0016_broker_health"
down_revision = "0015_function_families"

upgrade, downgrade = sql_steps(__file__)
