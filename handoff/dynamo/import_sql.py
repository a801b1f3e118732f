"""Statements of the port from DynamoDB into PostgreSQL (handoff import dynamodb).

Every insert is idempotent (ON CONFLICT DO NOTHING on the table's key): a
resumed import may meet items it already wrote.
"""

from __future__ import annotations

STATE = """
INSERT INTO handoff.document_state (tenant_id, document_id, run_id, owner, status, version,
                                    assigned_at, due_at, created_at, updated_at, completed_at,
                                    data)
VALUES (%(tenant)s, %(document_id)s, %(run_id)s, %(owner)s, %(status)s, %(version)s,
        %(assigned_at)s, %(due_at)s, %(created_at)s, %(updated_at)s, %(completed_at)s, %(data)s)
ON CONFLICT DO NOTHING
"""

HISTORY = """
INSERT INTO handoff.document_history (tenant_id, document_id, run_id, version, event_id,
                                      event_type, sender, owner_before, owner_after, status,
                                      accepted_at, assigned_at, due_at, data, correlation_id,
                                      causation_id)
VALUES (%(tenant)s, %(document_id)s, %(run_id)s, %(version)s, %(event_id)s, %(event_type)s,
        %(sender)s, %(owner_before)s, %(owner_after)s, %(status)s, %(accepted_at)s,
        %(assigned_at)s, %(due_at)s, %(data)s, %(correlation_id)s, %(causation_id)s)
ON CONFLICT DO NOTHING
"""

RECEIPT = """
INSERT INTO handoff.receipts (tenant_id, event_id, fingerprint, document_id, run_id, version,
                              owner, status, accepted_at)
VALUES (%(tenant)s, %(event_id)s, %(fingerprint)s, %(document_id)s, %(run_id)s, %(version)s,
        %(owner)s, %(status)s, %(accepted_at)s)
ON CONFLICT DO NOTHING
"""

PROGRESS = """
SELECT segment, last_key, items, done FROM handoff.import_progress
 WHERE source = %(source)s AND segments = %(segments)s
"""

SAVE_PROGRESS = """
INSERT INTO handoff.import_progress AS p (source, segment, segments, last_key, items, done)
VALUES (%(source)s, %(segment)s, %(segments)s, %(last_key)s, %(items)s, %(done)s)
ON CONFLICT (source, segment) DO UPDATE
   SET segments = EXCLUDED.segments, last_key = EXCLUDED.last_key, items = EXCLUDED.items,
       done = EXCLUDED.done, updated_at = now()
"""

FORGET = "DELETE FROM handoff.import_progress WHERE source = %(source)s"

# The per-owner counters of the imported tenants, recomputed from the states
# (the deadline counters are kept by the state table's trigger as rows arrive).
UNCOUNT = "DELETE FROM handoff.owner_counts WHERE tenant_id = ANY(%(tenants)s)"
RECOUNT = """
INSERT INTO handoff.owner_counts (tenant_id, owner, shard, assigned)
SELECT tenant_id, owner, 0, count(*) FROM handoff.document_state
 WHERE tenant_id = ANY(%(tenants)s) AND owner IS NOT NULL GROUP BY 1, 2
"""

# Receipts must name an accepted version.
ORPHAN_RECEIPTS = """
SELECT r.tenant_id, r.event_id FROM handoff.receipts r
 WHERE r.tenant_id = ANY(%(tenants)s)
   AND NOT EXISTS (SELECT 1 FROM handoff.document_history h
                    WHERE h.tenant_id = r.tenant_id AND h.document_id = r.document_id
                      AND h.run_id = r.run_id AND h.version = r.version)
 LIMIT 20
"""

UNREGISTERED_OWNERS = """
SELECT DISTINCT s.tenant_id, s.owner FROM handoff.document_state s
 WHERE s.tenant_id = ANY(%(tenants)s) AND s.owner IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM handoff.services v
                    WHERE v.tenant_id = s.tenant_id AND v.name = s.owner)
 ORDER BY 1, 2
"""
