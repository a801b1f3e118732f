"""Named statements of the tracker's read model (DESIGN.md "Tracker").

Every read runs as ``handoff_reader`` in a transaction whose tenant was set
by ``handoff.reader_session()`` from the caller's credential; the queries
filter on that tenant themselves and row-level security filters again.
Each statement is one snapshot: counts, oldest and overdue agree.
"""

from __future__ import annotations

# Transaction prologue: drop to the reader role, then accept the credential.
AS_READER = "SET LOCAL ROLE handoff_reader"
REPEATABLE_READ = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
READER_SESSION = "SELECT tenant_id, service FROM handoff.reader_session(%(role)s, %(secret_hash)s)"

_TENANT = "current_setting('handoff.tenant', true)"

# Strongly consistent: the committed state, latest run unless one is named.
DOCUMENT = f"""
SELECT document_id, run_id, owner, status, version, assigned_at, due_at, created_at,
       updated_at, completed_at, data,
       coalesce(owner IS NOT NULL AND due_at < now(), false) AS overdue,
       (SELECT count(*) FROM handoff.document_state r
         WHERE r.tenant_id = {_TENANT} AND r.document_id = %(document_id)s) AS runs
  FROM handoff.document_state
 WHERE tenant_id = {_TENANT} AND document_id = %(document_id)s
   AND (%(run_id)s::integer IS NULL OR run_id = %(run_id)s::integer)
 ORDER BY run_id DESC
 LIMIT 1
"""

# Accepted versions in order, of the named run or else the latest.
HISTORY = f"""
SELECT version, event_id, event_type, sender, owner_before, owner_after, status,
       accepted_at, assigned_at, due_at, data, correlation_id, causation_id
  FROM handoff.document_history
 WHERE tenant_id = {_TENANT} AND document_id = %(document_id)s
   AND run_id = coalesce(%(run_id)s::integer,
                         (SELECT max(run_id) FROM handoff.document_state
                           WHERE tenant_id = {_TENANT} AND document_id = %(document_id)s))
   AND version > %(after_version)s
 ORDER BY version
 LIMIT %(limit)s
"""

# [GSI ByOwner] keyset page: the row comparison is an index condition on
# document_state_by_owner (tenant, owner, assigned_at, document_id).
OWNER_DOCUMENTS = f"""
SELECT document_id, run_id, status, version, assigned_at, due_at, updated_at,
       coalesce(due_at < now(), false) AS overdue
  FROM handoff.document_state
 WHERE tenant_id = {_TENANT} AND owner = %(owner)s
   AND (assigned_at, document_id) > (%(after_at)s, %(after_id)s)
 ORDER BY assigned_at, document_id
 LIMIT %(limit)s
"""

# [GSI ByOwnerDue] deadline strictly before now, earliest first.
OWNER_OVERDUE = f"""
SELECT document_id, run_id, status, version, assigned_at, due_at, updated_at, true AS overdue
  FROM handoff.document_state
 WHERE tenant_id = {_TENANT} AND owner = %(owner)s AND due_at IS NOT NULL
   AND due_at < now()
   AND (due_at, document_id) > (%(after_at)s, %(after_id)s)
 ORDER BY due_at, document_id
 LIMIT %(limit)s
"""

# Per-owner counts as one snapshot. assigned: the shards summed. overdue:
# deadline hours that have fully passed, from owner_due_counts, plus an exact
# index count of the current hour up to now. oldest: one index probe each.
# The cost follows the number of owners, not of documents. Always at least
# one row, carrying the snapshot's time (owner NULL when nobody has work).
OWNER_COUNTS = f"""
WITH assigned AS (
    SELECT owner, sum(assigned)::bigint AS assigned
      FROM handoff.owner_counts
     WHERE tenant_id = {_TENANT}
     GROUP BY owner
    HAVING sum(assigned) > 0
), past_due AS (
    SELECT owner, sum(n)::bigint AS n
      FROM handoff.owner_due_counts
     WHERE tenant_id = {_TENANT} AND due_hour < handoff._due_bucket(now())
     GROUP BY owner
), counts AS (
    SELECT a.owner, a.assigned,
           coalesce(p.n, 0) + (
               SELECT count(*) FROM handoff.document_state s
                WHERE s.tenant_id = {_TENANT} AND s.owner = a.owner
                  AND s.due_at >= handoff._due_bucket(now()) AND s.due_at < now()
           ) AS overdue,
           (SELECT s.assigned_at FROM handoff.document_state s
             WHERE s.tenant_id = {_TENANT} AND s.owner = a.owner
             ORDER BY s.assigned_at, s.document_id
             LIMIT 1) AS oldest_assigned_at
      FROM assigned a LEFT JOIN past_due p USING (owner)
)
SELECT now() AS as_of, c.owner, c.assigned, c.overdue, c.oldest_assigned_at
  FROM (SELECT) AS snapshot LEFT JOIN counts c ON true
 ORDER BY c.owner
"""

# Finished documents, newest completion first: document_state_completed.
COMPLETED = f"""
SELECT document_id, run_id, status, version, created_at, completed_at
  FROM handoff.document_state
 WHERE tenant_id = {_TENANT} AND owner IS NULL
   AND (completed_at, document_id) < (%(before_at)s, %(before_id)s)
 ORDER BY completed_at DESC, document_id DESC
 LIMIT %(limit)s
"""

# Finished documents whose id starts with a prefix, in id order: a range on
# document_state_completed_by_id (byte order, so a prefix is a range). One
# lower bound only, the later of the prefix and the cursor: given both, the
# planner starts the scan at the row comparison's and reads every entry
# before the prefix (43 ms at 1M, measured).
COMPLETED_BY_PREFIX = f"""
SELECT document_id, run_id, status, version, created_at, completed_at
  FROM handoff.document_state
 WHERE tenant_id = {_TENANT} AND owner IS NULL
   AND (document_id COLLATE "C", run_id) > (%(after_id)s, %(after_run)s)
   AND document_id COLLATE "C" < %(high)s
 ORDER BY document_id COLLATE "C", run_id
 LIMIT %(limit)s
"""

_REJECTION_COLUMNS = """id, document_id, run_id, event_id, event_type, sender, code, message,
       expected_version, current_version, current_owner, requested_owner, status, rejected_at"""

# Newest first: rejections_by_tenant (tenant, id); the filters (NULL: all)
# are conditions on that walk, newest first until a page is found.
REJECTIONS = f"""
SELECT {_REJECTION_COLUMNS}
  FROM handoff.rejections
 WHERE tenant_id = {_TENANT} AND id < %(before_id)s
   AND (%(code)s::text IS NULL OR code = %(code)s)
   AND (%(sender)s::text IS NULL OR sender = %(sender)s)
   AND (%(since)s::timestamptz IS NULL OR rejected_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR rejected_at < %(until)s)
 ORDER BY id DESC
 LIMIT %(limit)s
"""

# One document's attempts, newest first: rejections_by_document.
DOCUMENT_REJECTIONS = f"""
SELECT {_REJECTION_COLUMNS}
  FROM handoff.rejections
 WHERE tenant_id = {_TENANT} AND document_id = %(document_id)s AND id < %(before_id)s
   AND (%(code)s::text IS NULL OR code = %(code)s)
   AND (%(sender)s::text IS NULL OR sender = %(sender)s)
   AND (%(since)s::timestamptz IS NULL OR rejected_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR rejected_at < %(until)s)
 ORDER BY id DESC
 LIMIT %(limit)s
"""

# Maintenance, run by the tracker as the owner role (not as the reader).
FOLD_DUE_COUNTS = "SELECT handoff.fold_due_counts()"
