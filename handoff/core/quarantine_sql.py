"""Named statements of the quarantine family, as operators use them (the admin role)."""

from __future__ import annotations

# Newest first; filters are optional (NULL matches all).
LIST = """
SELECT id, tenant_id, consumer, event_id, event_type, document_id, run_id, version, category,
       attempts, status, first_failed_at, last_failed_at, left(error, 200) AS error
  FROM handoff.quarantine
 WHERE (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
   AND (%(consumer)s::text IS NULL OR consumer = %(consumer)s)
   AND (%(status)s::text IS NULL OR status = %(status)s)
 ORDER BY id DESC
 LIMIT %(limit)s
"""

SHOW = """
SELECT id, tenant_id, consumer, event_id, event_type, document_id, run_id, version, topic,
       kafka_partition, kafka_offset, handler, handler_version, category, error, attempts,
       first_failed_at, last_failed_at, status, resolved_at, headers,
       octet_length(message_value) AS value_bytes
  FROM handoff.quarantine
 WHERE id = %(id)s
"""

# By time, then id: on Citus an entry's trail is written on two kinds of node (its
# consumer's calls on the tenant's worker, an operator's on the coordinator), and ids
# drawn on different nodes come from different ranges (docs/scaling.md).
AUDIT = """
SELECT at, actor, action, detail FROM handoff.quarantine_audit
 WHERE quarantine_id = %(id)s ORDER BY at, id
"""

# An operator names an entry by id; its tenant is looked up first, so that the
# decision's statements name it (on Citus: one shard, and the row lock that
# FOR UPDATE needs).
TENANT_OF = "SELECT tenant_id FROM handoff.quarantine WHERE id = %(id)s"

# Row-locked, so two operators deciding at once are applied one after the other.
LOCK = """
SELECT status FROM handoff.quarantine WHERE tenant_id = %(tenant)s AND id = %(id)s FOR UPDATE
"""

# resolved_at from now() outside a CASE: Citus refuses a non-immutable function in
# a CASE of a write (the NULL of a retry makes the sum NULL).
SET_STATUS = """
UPDATE handoff.quarantine
   SET status = %(status)s,
       resolved_at = now() + CASE WHEN %(status)s = 'discarded' THEN interval '0' END
 WHERE tenant_id = %(tenant)s AND id = %(id)s
"""

RECORD = """
INSERT INTO handoff.quarantine_audit (tenant_id, quarantine_id, actor, action, detail)
VALUES (%(tenant)s, %(id)s, %(actor)s, %(action)s, %(detail)s)
"""
