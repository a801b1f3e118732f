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

AUDIT = """
SELECT at, actor, action, detail FROM handoff.quarantine_audit
 WHERE quarantine_id = %(id)s ORDER BY id
"""

# Row-locked, so two operators deciding at once are applied one after the other.
LOCK = "SELECT status FROM handoff.quarantine WHERE id = %(id)s FOR UPDATE"

SET_STATUS = """
UPDATE handoff.quarantine
   SET status = %(status)s,
       resolved_at = CASE WHEN %(status)s = 'discarded' THEN now() END
 WHERE id = %(id)s
"""

RECORD = """
INSERT INTO handoff.quarantine_audit (tenant_id, quarantine_id, actor, action, detail)
SELECT q.tenant_id, q.id, %(actor)s, %(action)s, %(detail)s
  FROM handoff.quarantine q WHERE q.id = %(id)s
"""
