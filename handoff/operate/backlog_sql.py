"""Statements of the recovery budget (``handoff backlog``)."""

from __future__ import annotations

NOW = "SELECT now()"

# The relay's side: waiting rows and the oldest waiting; then the highest id so far.
RELAY = """
SELECT count(*)::bigint AS pending, min(created_at) AS oldest FROM handoff.outbox_pending
"""
HIGH = "SELECT coalesce(max(id), 0) FROM handoff.outbox"

# Rows inserted after a snapshot (ids above its highest): arrivals.
ARRIVED = "SELECT count(*)::bigint FROM handoff.outbox WHERE id > %(high)s"
# On Citus, where ids are not one sequence: rows created between two snapshots
# (outbox_created_brin finds them).
CREATED_BETWEEN = """
SELECT count(*)::bigint FROM handoff.outbox
 WHERE created_at >= %(since)s AND created_at < %(until)s
"""

# The consumers to look at: every service (of a tenant), its default group.
SERVICES = """
SELECT tenant_id, name FROM handoff.services
 WHERE (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s) ORDER BY 1, 2
"""

# Completed business work of each consumer since a time: its guard rows
# (an event applied, or found stale; consumer_guards_by_age finds them).
WORK_SINCE = """
SELECT tenant_id, consumer, count(*)::bigint AS n FROM handoff.consumer_guards
 WHERE taken_at >= %(since)s AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
 GROUP BY 1, 2
"""

# For the experiment: what a consumer's dependencies show during a step.
QUARANTINED_SINCE = """
SELECT count(*)::bigint FROM handoff.quarantine
 WHERE tenant_id = %(tenant)s AND consumer = %(consumer)s AND first_failed_at >= %(since)s
"""
PROVIDER_TROUBLE_SINCE = """
SELECT count(*)::bigint FROM handoff.effect_history h JOIN handoff.effect_intents e
    ON e.tenant_id = h.tenant_id AND e.id = h.intent_id
 WHERE e.tenant_id = %(tenant)s AND e.consumer = %(consumer)s AND h.at >= %(since)s
   AND h.to_state IN ('failed', 'unknown')
"""
# Backends of this database waiting on a lock right now (a saturation sign).
LOCK_WAITS = """
SELECT count(*) FILTER (WHERE wait_event_type IN ('Lock', 'LWLock'))::bigint,
       count(*) FILTER (WHERE state = 'active')::bigint
  FROM pg_stat_activity WHERE datname = current_database()
"""

# Which tenant and service a credential's role is.
SERVICE_OF_ROLE = "SELECT tenant_id, name FROM handoff.services WHERE db_role = %(role)s"

# One consumer's applied events since a time (the experiment's throughput).
CONSUMER_WORK_SINCE = """
SELECT count(*)::bigint FROM handoff.consumer_guards
 WHERE tenant_id = %(tenant)s AND consumer = %(consumer)s AND taken_at >= %(since)s
"""
