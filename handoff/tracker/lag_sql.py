"""Statements of the consumer-lag and broker-health samples (migrations 0012, 0016):
written by the sampler, read by the operate page."""

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
# A sample that worked, with the brokers it found; a missing broker keeps the time
# it was first seen missing until none is.
SAMPLED = """
INSERT INTO handoff.lag_sampler AS s
       (cluster, sampled_at, brokers_up, brokers_missing, missing_since, under_replicated,
        offline_partitions)
VALUES (%(cluster)s, now(), %(up)s, %(missing)s,
        CASE WHEN cardinality(%(missing)s::integer[]) > 0 THEN now() END,
        %(under_replicated)s, %(offline)s)
ON CONFLICT (cluster) DO UPDATE
   SET sampled_at = now(), failing_since = NULL, error = NULL, updated_at = now(),
       brokers_up = excluded.brokers_up, brokers_missing = excluded.brokers_missing,
       missing_since = CASE WHEN cardinality(excluded.brokers_missing) > 0
                            THEN coalesce(s.missing_since, now()) END,
       under_replicated = excluded.under_replicated,
       offline_partitions = excluded.offline_partitions
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
 WHERE cluster = %(cluster)s AND tenant_id = %(tenant)s::text
 ORDER BY consumer
"""
# Aggregates, so a cluster never sampled still answers one row (of nulls).
STATUS = """
SELECT max(sampled_at) AS sampled_at, max(failing_since) AS failing_since,
       max(brokers_up) AS brokers_up, max(brokers_missing) AS brokers_missing,
       max(missing_since) AS missing_since, max(under_replicated) AS under_replicated,
       max(offline_partitions) AS offline_partitions
  FROM handoff.lag_sampler WHERE cluster = %(cluster)s
"""
