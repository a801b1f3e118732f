"""Statements of the port from PostgreSQL into DynamoDB (handoff export dynamodb).

Each family is read in keyset pages (never a whole table in memory), as the
admin role, for the chosen tenants (NULL: every tenant).
"""

from __future__ import annotations

_TENANTS = "(%(tenants)s::text[] IS NULL OR tenant_id = ANY(%(tenants)s::text[]))"

SERVICES = f"""
SELECT tenant_id, name, can_create, db_role, secret_hash, revoked_at IS NOT NULL AS revoked
  FROM handoff.services WHERE {_TENANTS} ORDER BY tenant_id, name
"""

# A page of runs; their history follows in one read (HISTORY), so that the
# data each event carries (the state's data at that version: every change's
# data merged in order, as the emit function merges it) is built per run.
STATES = f"""
SELECT tenant_id, document_id, run_id, owner, status, version, assigned_at, due_at,
       created_at, updated_at, completed_at, data
  FROM handoff.document_state
 WHERE {_TENANTS} AND (tenant_id, document_id, run_id) > (%(k0)s, %(k1)s, %(k2)s::integer)
 ORDER BY tenant_id, document_id, run_id LIMIT %(limit)s
"""

HISTORY = """
SELECT h.tenant_id, h.document_id, h.run_id, h.version, h.event_id, h.event_type, h.sender,
       h.owner_before, h.owner_after, h.status, handoff._micros(h.accepted_at) AS accepted,
       handoff._micros(h.assigned_at) AS assigned, handoff._micros(h.due_at) AS due, h.data,
       h.correlation_id, h.causation_id
  FROM unnest(%(tenant)s::text[], %(document)s::text[], %(run)s::integer[]) AS r(t, d, n)
  JOIN handoff.document_history h
    ON h.tenant_id = r.t AND h.document_id = r.d AND h.run_id = r.n
 ORDER BY h.tenant_id, h.document_id, h.run_id, h.version
"""

RECEIPTS = f"""
SELECT tenant_id, event_id, fingerprint, document_id, run_id, version, owner, status,
       accepted_at
  FROM handoff.receipts
 WHERE {_TENANTS} AND (tenant_id, event_id) > (%(k0)s, %(k1)s)
 ORDER BY tenant_id, event_id LIMIT %(limit)s
"""

COUNTS = f"""
SELECT tenant_id, owner, sum(assigned)::bigint AS assigned FROM handoff.owner_counts
 WHERE {_TENANTS} GROUP BY tenant_id, owner ORDER BY tenant_id, owner
"""

REJECTIONS = f"""
SELECT id, tenant_id, rejected_at, code, message, sender, document_id, event_id, event_type,
       expected_version, current_version, current_owner, requested_owner, status
  FROM handoff.rejections
 WHERE {_TENANTS} AND id > %(k0)s::bigint ORDER BY id LIMIT %(limit)s
"""

TOTALS = f"""
SELECT (SELECT count(*) FROM handoff.document_state WHERE {_TENANTS}),
       (SELECT count(*) FROM handoff.document_history WHERE {_TENANTS}),
       (SELECT count(*) FROM handoff.receipts WHERE {_TENANTS})
"""
