"""Statements of the store interface's PostgreSQL side (core/store.py): reads by
tenant for the contract suite that runs over both stores, as the admin role."""

from __future__ import annotations

DOCUMENT = """
SELECT document_id, run_id, owner, status, version, assigned_at, due_at, data
  FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND document_id = %(document_id)s
   AND (%(run_id)s::integer IS NULL OR run_id = %(run_id)s::integer)
 ORDER BY run_id DESC LIMIT 1
"""

HISTORY = """
SELECT version, event_type AS "eventType", owner_after AS owner,
       owner_before AS "previousOwner", status, sender AS source
  FROM handoff.document_history
 WHERE tenant_id = %(tenant)s AND document_id = %(document_id)s AND run_id = %(run_id)s
 ORDER BY version
"""

OWNER_DOCUMENTS = """
SELECT document_id, run_id FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND owner = %(owner)s
 ORDER BY assigned_at, document_id LIMIT %(limit)s
"""

OWNER_OVERDUE = """
SELECT document_id, run_id FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND owner = %(owner)s AND due_at < now()
 ORDER BY due_at, document_id LIMIT %(limit)s
"""

OWNER_COUNTS = """
SELECT owner, sum(assigned)::bigint FROM handoff.owner_counts
 WHERE tenant_id = %(tenant)s GROUP BY owner HAVING sum(assigned) > 0 ORDER BY owner
"""

REJECTIONS = """
SELECT code, document_id, sender, event_id FROM handoff.rejections
 WHERE tenant_id = %(tenant)s ORDER BY id DESC LIMIT %(limit)s
"""
