"""Named statements of the tracker's read model (DESIGN.md "Tracker").

Every read runs as ``handoff_reader`` in a transaction whose tenant was set
by ``handoff.reader_session()`` from the caller's credential; the queries
filter on that tenant themselves (a parameter) and row-level security
filters again.
Each statement is one snapshot: counts, oldest and overdue agree.
"""

from __future__ import annotations

# Transaction prologue: drop to the reader role, then accept the credential.
AS_READER = "SET LOCAL ROLE handoff_reader"
REPEATABLE_READ = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
READER_SESSION = "SELECT tenant_id, service FROM handoff.reader_session(%(role)s, %(secret_hash)s)"

# The reader's tenant, a parameter every read is given (ReadModel.read): as a
# value it routes a statement to the tenant's shard on Citus (a setting read in
# the query would send it to every shard); row-level security still checks it
# against the tenant reader_session set.
_TENANT = "%(tenant)s::text"

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
       accepted_at, assigned_at, due_at, data, correlation_id, causation_id,
       substring(traceparent FROM 4 FOR 32) AS trace_id
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

# Per-owner counts as one snapshot (handoff.owner_waiting: the shards summed,
# passed deadline hours plus an exact count of the current hour, the oldest
# assignment by one index probe). The cost follows the number of owners, not
# of documents. Always at least one row, carrying the snapshot's time (owner
# NULL when nobody has work).
OWNER_COUNTS = """
SELECT now() AS as_of, c.owner, c.assigned, c.overdue, c.oldest_assigned_at
  FROM (SELECT) AS snapshot
  LEFT JOIN handoff.owner_waiting(%(tenant)s::text) c ON true
 ORDER BY c.owner
"""

# The median and p90 age of each owner's waiting work, from the latest minute
# sample. A statement of its own, not joined to the counts: on Citus a query
# that joins a function's rows to a distributed table goes down to the shard
# whole, and the function's own queries cannot run from there.
OWNER_AGES = f"""
SELECT s.owner, s.age_p50_from, s.age_p90_from
  FROM handoff.owner_samples s
 WHERE s.tenant_id = {_TENANT}
   AND s.sampled_at = (SELECT max(sampled_at) FROM handoff.owner_samples
                        WHERE tenant_id = {_TENANT}
                          AND sampled_at > now() - interval '10 minutes')
"""

# The changes of owner ever folded (flow_edges): what the stage order is
# learned from. A handful of rows per tenant.
FLOW_EDGES = f"""
SELECT from_owner, to_owner, n, last_at
  FROM handoff.flow_edges
 WHERE tenant_id = {_TENANT}
"""

# Documents that left and entered each owner in the last %(minutes)s
# minutes, from the minute rows (from '' = created, to '' = completed).
FLOW_RECENT = f"""
SELECT owner, sum(n_out)::bigint AS departed, sum(n_in)::bigint AS arrived
  FROM (SELECT from_owner AS owner, n AS n_out, 0 AS n_in
          FROM handoff.flow_minutes
         WHERE tenant_id = {_TENANT} AND minute >= now() - make_interval(mins => %(minutes)s)
        UNION ALL
        SELECT to_owner, 0, n
          FROM handoff.flow_minutes
         WHERE tenant_id = {_TENANT} AND minute >= now() - make_interval(mins => %(minutes)s)
       ) AS moves
 GROUP BY owner
"""

# Each edge's documents in the last %(minutes)s minutes (the flow drawing's weights).
FLOW_WINDOW_EDGES = f"""
SELECT from_owner, to_owner, sum(n)::bigint AS n
  FROM handoff.flow_minutes
 WHERE tenant_id = {_TENANT} AND minute >= now() - make_interval(mins => %(minutes)s)
 GROUP BY from_owner, to_owner
"""

# Quarantined events waiting for a person, per consumer (= service).
QUARANTINED = f"""
SELECT consumer, count(*)::bigint AS quarantined
  FROM handoff.quarantine
 WHERE tenant_id = {_TENANT} AND status IN ('open', 'retry')
 GROUP BY consumer
"""

# The samples over a window of the owners with the most waiting work now
# (%(owners)s of them): the largest backlog and overdue count and the oldest
# age seen in each bucket. A day reads only the coarse samples (one per owner
# per 10 minutes: owner_samples_coarse); an hour reads every minute's.
_SAMPLES_OVER_TIME = """
WITH latest AS (
    SELECT max(sampled_at) AS at FROM handoff.owner_samples
     WHERE tenant_id = {tenant} AND sampled_at > now() - interval '10 minutes'
), top AS (
    SELECT owner FROM handoff.owner_samples
     WHERE tenant_id = {tenant} AND sampled_at = (SELECT at FROM latest)
     ORDER BY assigned DESC, owner
     LIMIT %(owners)s
)
SELECT date_bin(make_interval(secs => %(bucket_s)s), p.sampled_at,
                timestamptz '2000-01-01 00:00:00+00') AS at,
       top.owner, max(p.assigned)::bigint AS assigned, max(p.overdue)::bigint AS overdue,
       max(extract(epoch FROM p.sampled_at - p.oldest_assigned_at))::float8 AS oldest_s
  FROM top
 CROSS JOIN LATERAL (
      -- One index range per charted owner (the primary key, or the coarse index).
      SELECT sampled_at, assigned, overdue, oldest_assigned_at
        FROM handoff.owner_samples s
       WHERE s.tenant_id = {tenant} AND s.owner = top.owner
         AND s.sampled_at >= now() - make_interval(secs => %(span_s)s){coarse}
 ) AS p
 GROUP BY 1, 2
 ORDER BY 1, 2
"""
SAMPLES_OVER_TIME = _SAMPLES_OVER_TIME.format(tenant=_TENANT, coarse="")
SAMPLES_OVER_TIME_COARSE = _SAMPLES_OVER_TIME.format(tenant=_TENANT, coarse=" AND s.coarse")

# Arrivals (created) and completions per bucket over a window: flow_minutes_ends.
FLOW_OVER_TIME = f"""
SELECT date_bin(make_interval(secs => %(bucket_s)s), minute,
                timestamptz '2000-01-01 00:00:00+00') AS at,
       coalesce(sum(n) FILTER (WHERE from_owner = ''), 0)::bigint AS arrived,
       coalesce(sum(n) FILTER (WHERE to_owner = ''), 0)::bigint AS completed
  FROM handoff.flow_minutes
 WHERE tenant_id = {_TENANT} AND minute >= now() - make_interval(secs => %(span_s)s)
   AND (from_owner = '' OR to_owner = '')
 GROUP BY 1
 ORDER BY 1
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

# The filters (NULL: all) and the page of both rejection lists, newest first.
_REJECTION_FILTER = """
   AND (%(code)s::text IS NULL OR code = %(code)s)
   AND (%(sender)s::text IS NULL OR sender = %(sender)s)
   AND (%(since)s::timestamptz IS NULL OR rejected_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR rejected_at < %(until)s)
 ORDER BY id DESC
 LIMIT %(limit)s"""

# Newest first: rejections_by_tenant (tenant, id); the filters are conditions
# on that walk, newest first until a page is found.
REJECTIONS = f"""
SELECT {_REJECTION_COLUMNS}
  FROM handoff.rejections
 WHERE tenant_id = {_TENANT} AND id < %(before_id)s
{_REJECTION_FILTER}"""

# One document's attempts, newest first: rejections_by_document.
DOCUMENT_REJECTIONS = f"""
SELECT {_REJECTION_COLUMNS}
  FROM handoff.rejections
 WHERE tenant_id = {_TENANT} AND document_id = %(document_id)s AND id < %(before_id)s
{_REJECTION_FILTER}"""

# -- operate ----------------------------------------------------------------------------

NOW = "SELECT now() AS now"
# The relay is shared by every tenant, so its backlog is the system's (pending rows
# capped at %(cap)s; the oldest is the first of them); parked rows are the reader's
# tenant's own. Read as the API's role (Query.system): the reader cannot read the
# outbox.
RELAY_BACKLOG = f"""
SELECT (SELECT count(*) FROM (SELECT 1 FROM handoff.outbox_pending LIMIT %(cap)s) AS p)
           AS pending,
       (SELECT created_at FROM handoff.outbox_pending ORDER BY id LIMIT 1) AS oldest_pending_at,
       (SELECT count(*) FROM handoff.outbox
         WHERE tenant_id = {_TENANT} AND parked_at IS NOT NULL) AS parked
"""

# Quarantined events waiting for a person, newest first.
QUARANTINE_PENDING = f"""
SELECT id, consumer, event_id, event_type, document_id, run_id, version, category, attempts,
       status, first_failed_at, last_failed_at, left(error, 300) AS error
  FROM handoff.quarantine
 WHERE tenant_id = {_TENANT} AND status IN ('open', 'retry')
 ORDER BY id DESC
 LIMIT %(limit)s
"""

# Effects whose outcome nobody could establish, newest first: effect_intents_unresolved.
EFFECTS_UNRESOLVED = f"""
SELECT id, consumer, effect, document_id, run_id, state, attempts, lookups, provider_ref,
       owner, left(error, 300) AS error, updated_at
  FROM handoff.effect_intents
 WHERE tenant_id = {_TENANT} AND reconciliation = 'unresolved'
 ORDER BY id DESC
 LIMIT %(limit)s
"""

# Does the database sort text by bytes? Then an id prefix is a closed range.
BYTE_ORDER = """
SELECT datcollate IN ('C', 'POSIX') FROM pg_database WHERE datname = current_database()
"""

# Maintenance, run by the tracker as the owner role (not as the reader).
FOLD_DUE_COUNTS = "SELECT handoff.fold_due_counts()"
FOLD_FLOW = "SELECT handoff.fold_flow(%(limit)s) AS folded"
SAMPLE_OWNERS = "SELECT handoff.sample_owners()"


# -- find --------------------------------------------------------------------------------
# Find walks ONE index in its order, at most %(budget)s entries per request,
# and filters what it walked: the cost of a request is bounded by the budget
# whatever the filters, and a page that is not full after the budget says
# how far it got (its cursor continues from there). The walks:
#   id        the primary key (tenant, document_id, run_id): every run, active
#             or finished; an id prefix is a range on it
#   assigned  document_state_by_owner (tenant, owner, assigned_at, id): one
#             owner's waiting work; an assigned-at range is a range on it
#   due       document_state_by_owner_due (tenant, owner, due_at, id): one
#             owner's work with a deadline; "overdue" is a range on it
FIND_WALKS = {
    "id": (
        f"tenant_id = {_TENANT} AND document_id >= %(low)s",
        "document_id {d}, run_id {d}",
        "(document_id, run_id) {op} (%(after_id)s, %(after_run)s)",
    ),
    "assigned": (
        f"tenant_id = {_TENANT} AND owner = %(owner)s AND assigned_at >= %(since)s"
        " AND assigned_at < %(until)s",
        "assigned_at {d}, document_id {d}",
        "(assigned_at, document_id) {op} (%(after_at)s, %(after_id)s)",
    ),
    "due": (
        f"tenant_id = {_TENANT} AND owner = %(owner)s AND due_at IS NOT NULL"
        " AND due_at < %(due_before)s",
        "due_at {d}, document_id {d}",
        "(due_at, document_id) {op} (%(after_at)s, %(after_id)s)",
    ),
}
# Below the prefix's range end (byte order): only where the database sorts
# text by bytes (collation C, as `handoff stack` creates it); elsewhere the
# walk has no upper end and the budget bounds it.
FIND_ID_HIGH = " AND document_id < %(high)s"
FIND_FILTERS = """
   starts_with(document_id, %(prefix)s)
   AND (%(owner)s::text IS NULL OR owner = %(owner)s)
   AND (%(state)s = 'any' OR (%(state)s = 'active') = (owner IS NOT NULL))
   AND (%(status)s::text IS NULL OR status = %(status)s)
   AND (NOT %(overdue)s OR (owner IS NOT NULL AND due_at < now()))
   AND (%(filter_since)s::timestamptz IS NULL OR assigned_at >= %(filter_since)s)
   AND (%(filter_until)s::timestamptz IS NULL OR assigned_at < %(filter_until)s)
   AND (%(contains)s::jsonb IS NULL OR data @> %(contains)s::jsonb)
"""


def find(walk: str, descending: bool, after: bool, high: bool) -> str:
    """The statement of one find walk: what it walked, then the page of matches.

    One row per match, each carrying how many entries were walked and the
    walk's last key; one row with NULL match columns when nothing matched.
    """
    bounds, order, cursor = FIND_WALKS[walk]
    where = bounds + (FIND_ID_HIGH if high and walk == "id" else "")
    if after:
        where += " AND " + cursor.format(op="<" if descending else ">")
    forward = order.format(d="DESC" if descending else "ASC")
    backward = order.format(d="ASC" if descending else "DESC")
    return f"""
WITH walk AS MATERIALIZED (
    SELECT document_id, run_id, owner, status, version, assigned_at, due_at, updated_at,
           completed_at, data
      FROM handoff.document_state
     WHERE {where}
     ORDER BY {forward}
     LIMIT %(budget)s
)
SELECT w.scanned, l.*, m.*
  FROM (SELECT count(*) AS scanned FROM walk) w
  LEFT JOIN LATERAL (
      SELECT document_id AS last_document_id, run_id AS last_run_id,
             assigned_at AS last_assigned_at, due_at AS last_due_at
        FROM walk ORDER BY {backward} LIMIT 1) l ON true
  LEFT JOIN LATERAL (
      SELECT document_id, run_id, owner, status, version, assigned_at, due_at, updated_at,
             completed_at, data, coalesce(owner IS NOT NULL AND due_at < now(), false) AS overdue
        FROM walk
       WHERE {FIND_FILTERS}
       ORDER BY {forward}
       LIMIT %(limit)s) m ON true
"""
