"""Statements of the consumer-lag samples (migration 0012): written by the sampler,
read by the operate page."""

from __future__ import annotations

# Every registered service of every tenant: each may run a consumer whose
# group is handoff.<tenant>.<service>.
SERVICES = "SELECT tenant_id, name FROM handoff.services ORDER BY tenant_id, name"

# One sampler among several trackers of a Kafka cluster: the holder of this
# session lock samples (a database serves one cluster; the key names it anyway,
# so that a tracker pointed elsewhere, as some tests do, is not kept waiting).
TRY_LOCK = "SELECT pg_try_advisory_lock(hashtext('handoff.lag_sampler ' || %(bootstrap)s))"

UPSERT = """
INSERT INTO handoff.consumer_lag (tenant_id, consumer, group_id, lag, partitions, sampled_at)
VALUES (%(tenant_id)s, %(consumer)s, %(group_id)s, %(lag)s, %(partitions)s, now())
ON CONFLICT (tenant_id, consumer) DO UPDATE
   SET group_id = excluded.group_id, lag = excluded.lag, partitions = excluded.partitions,
       sampled_at = excluded.sampled_at
"""
# Groups not seen for a few rounds are gone (their service removed, their
# offsets expired): their rows go too.
FORGET_STALE = """
DELETE FROM handoff.consumer_lag WHERE sampled_at < now() - make_interval(secs => %(keep_s)s)
"""
SAMPLED = """
UPDATE handoff.lag_sampler
   SET sampled_at = now(), failing_since = NULL, error = NULL, updated_at = now()
"""
FAILING = """
UPDATE handoff.lag_sampler
   SET failing_since = coalesce(failing_since, now()), error = left(%(error)s, 500),
       updated_at = now()
"""

# The reader's view (row-level security keeps it to the tenant).
LAGS = """
SELECT consumer, group_id AS "group", lag, partitions, sampled_at
  FROM handoff.consumer_lag
 WHERE tenant_id = current_setting('handoff.tenant', true)
 ORDER BY consumer
"""
STATUS = "SELECT sampled_at, failing_since FROM handoff.lag_sampler"
