"""Statements of the consumer-lag samples (migration 0012): written by the sampler,
read by the operate page."""

from __future__ import annotations

# Every registered service of every tenant: each may run a consumer whose
# group is handoff.<tenant>.<service>.
SERVICES = "SELECT tenant_id, name FROM handoff.services ORDER BY tenant_id, name"

# One sampler among several trackers of a Kafka cluster: the holder of this
# session lock samples.
TRY_LOCK = "SELECT pg_try_advisory_lock(hashtext('handoff.lag_sampler ' || %(cluster)s))"


def cluster_of(bootstrap: str) -> str:
    """A Kafka cluster's key: its bootstrap servers, sorted (the order names no other)."""
    return ",".join(sorted(server.strip() for server in bootstrap.split(",")))


UPSERT = """
INSERT INTO handoff.consumer_lag (cluster, tenant_id, consumer, group_id, lag, partitions,
                                  sampled_at)
VALUES (%(cluster)s, %(tenant_id)s, %(consumer)s, %(group_id)s, %(lag)s, %(partitions)s, now())
ON CONFLICT (cluster, tenant_id, consumer) DO UPDATE
   SET group_id = excluded.group_id, lag = excluded.lag, partitions = excluded.partitions,
       sampled_at = excluded.sampled_at
"""
# Groups not seen for a few rounds are gone (their service removed, their
# offsets expired): their rows go too.
FORGET_STALE = """
DELETE FROM handoff.consumer_lag
 WHERE cluster = %(cluster)s AND sampled_at < now() - make_interval(secs => %(keep_s)s)
"""
SAMPLED = """
INSERT INTO handoff.lag_sampler AS s (cluster, sampled_at) VALUES (%(cluster)s, now())
ON CONFLICT (cluster) DO UPDATE
   SET sampled_at = now(), failing_since = NULL, error = NULL, updated_at = now()
"""
FAILING = """
INSERT INTO handoff.lag_sampler AS s (cluster, failing_since, error)
VALUES (%(cluster)s, now(), left(%(error)s, 500))
ON CONFLICT (cluster) DO UPDATE
   SET failing_since = coalesce(s.failing_since, now()), error = excluded.error,
       updated_at = now()
"""

# The reader's view of its cluster (row-level security keeps it to the tenant).
LAGS = """
SELECT consumer, group_id AS "group", lag, partitions, sampled_at
  FROM handoff.consumer_lag
 WHERE cluster = %(cluster)s AND tenant_id = current_setting('handoff.tenant', true)
 ORDER BY consumer
"""
STATUS = """
SELECT max(sampled_at) AS sampled_at, max(failing_since) AS failing_since
  FROM handoff.lag_sampler WHERE cluster = %(cluster)s
"""
