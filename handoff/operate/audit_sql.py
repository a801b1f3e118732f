"""The auditor's statements: each returns the rows that break one invariant.

Every check runs in one REPEATABLE READ, READ ONLY transaction, so all of
them see one snapshot (counts and states agree or they do not, nothing moves
in between). The heavy ones are aggregates the server computes (hash or
sorted aggregation, spilling to disk past work_mem), and their rows reach
the auditor through a server-side cursor: memory stays bounded on 10M
documents, whatever the number of breaches.

%(tenant)s NULL means every tenant.
"""

from __future__ import annotations

SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
NOW = "SELECT now()"

_ONE = "(%(tenant)s::text IS NULL OR {t}.tenant_id = %(tenant)s)"

TENANTS = f"""
SELECT DISTINCT tenant_id FROM handoff.services s WHERE {_ONE.format(t="s")} ORDER BY 1
"""

# The per-owner counters (owner_counts, sharded) against the documents.
COUNTS = f"""
WITH counted AS (
    SELECT tenant_id, owner, sum(assigned)::bigint AS n FROM handoff.owner_counts c
     WHERE {_ONE.format(t="c")} GROUP BY 1, 2
), actual AS (
    SELECT tenant_id, owner, count(*)::bigint AS n FROM handoff.document_state s
     WHERE owner IS NOT NULL AND {_ONE.format(t="s")} GROUP BY 1, 2
)
SELECT tenant_id, owner, coalesce(c.n, 0) AS counted, coalesce(a.n, 0) AS actual
  FROM counted c FULL JOIN actual a USING (tenant_id, owner)
 WHERE coalesce(c.n, 0) <> coalesce(a.n, 0)
 ORDER BY 1, 2
"""

# The deadline-hour counters against the documents, hours that have passed
# taken together (the tracker folds them into one row, -infinity).
DUE_COUNTS = f"""
WITH hours AS (
    SELECT tenant_id, owner,
           CASE WHEN due_hour < handoff._due_bucket(now()) THEN '-infinity' ELSE due_hour END
               AS due_hour,
           n
      FROM handoff.owner_due_counts d WHERE {_ONE.format(t="d")}
), counted AS (
    SELECT tenant_id, owner, due_hour, sum(n)::bigint AS n FROM hours GROUP BY 1, 2, 3
), actual AS (
    SELECT tenant_id, owner,
           CASE WHEN due_at < handoff._due_bucket(now()) THEN '-infinity'
                ELSE handoff._due_bucket(due_at) END AS due_hour,
           count(*)::bigint AS n
      FROM handoff.document_state s
     WHERE owner IS NOT NULL AND due_at IS NOT NULL AND {_ONE.format(t="s")}
     GROUP BY 1, 2, 3
)
SELECT tenant_id, owner, due_hour, coalesce(c.n, 0) AS counted, coalesce(a.n, 0) AS actual
  FROM counted c FULL JOIN actual a USING (tenant_id, owner, due_hour)
 WHERE coalesce(c.n, 0) <> coalesce(a.n, 0)
 ORDER BY 1, 2, 3
"""

# Versions 1..n of every run, n its state's version, no history without state.
VERSIONS = f"""
WITH h AS (
    SELECT tenant_id, document_id, run_id, count(*)::bigint AS n,
           min(version) AS lo, max(version) AS hi
      FROM handoff.document_history h WHERE {_ONE.format(t="h")}
     GROUP BY 1, 2, 3
)
SELECT tenant_id, document_id, run_id, s.version AS state_version,
       h.n AS versions, h.lo AS first, h.hi AS last
  FROM (SELECT tenant_id, document_id, run_id, version FROM handoff.document_state s
         WHERE {_ONE.format(t="s")}) s
  FULL JOIN h USING (tenant_id, document_id, run_id)
 WHERE s.version IS NULL OR h.n IS NULL OR h.lo <> 1 OR h.hi <> s.version OR h.n <> s.version
 ORDER BY 1, 2, 3
"""

# Accepted versions the outbox does not hold, within the window the relay
# keeps published rows (older ones may rightly have been purged).
OUTBOX_MISSING = f"""
SELECT h.tenant_id, h.document_id, h.run_id, h.version, h.event_id, h.accepted_at
  FROM handoff.document_history h
 WHERE {_ONE.format(t="h")} AND h.accepted_at > now() - make_interval(secs => %(window_s)s)
   AND NOT EXISTS (SELECT 1 FROM handoff.outbox o
                    WHERE o.tenant_id = h.tenant_id AND o.document_id = h.document_id
                      AND o.run_id = h.run_id AND o.version = h.version)
 ORDER BY h.accepted_at
"""

# Not a breach by itself: what is still waiting for the relay, and how long.
OUTBOX_PENDING = f"""
SELECT (SELECT count(*) FROM handoff.outbox_pending o WHERE {_ONE.format(t="o")})::bigint
           AS pending,
       (SELECT min(created_at) FROM handoff.outbox_pending o WHERE {_ONE.format(t="o")})
           AS oldest_pending_at,
       (SELECT count(*) FROM handoff.outbox o
         WHERE o.parked_at IS NOT NULL AND {_ONE.format(t="o")})::bigint AS parked
"""

# Work waiting for a person whose person is gone: a quarantined event or an
# unresolved effect owned by a service that is no longer registered.
OWNERLESS = f"""
SELECT q.tenant_id, 'quarantine' AS kind, q.id, q.consumer AS owner, q.status AS state
  FROM handoff.quarantine q
 WHERE q.status IN ('open', 'retry') AND {_ONE.format(t="q")}
   AND NOT EXISTS (SELECT 1 FROM handoff.services s
                    WHERE s.tenant_id = q.tenant_id AND s.name = q.consumer)
UNION ALL
SELECT e.tenant_id, 'effect', e.id, e.owner, e.state
  FROM handoff.effect_intents e
 WHERE e.reconciliation = 'unresolved' AND {_ONE.format(t="e")}
   AND NOT EXISTS (SELECT 1 FROM handoff.services s
                    WHERE s.tenant_id = e.tenant_id AND s.name = e.owner)
ORDER BY 1, 2, 3
"""

# Succeeded effects of one effect name, for the provider check: in order of
# the business reference, so a reference's intents arrive together.
SUCCEEDED_EFFECTS = f"""
SELECT id, tenant_id, consumer, idempotency_key, provider_ref, request->>'reference' AS reference
  FROM handoff.effect_intents e
 WHERE effect = %(effect)s AND state = 'succeeded' AND {_ONE.format(t="e")}
 ORDER BY request->>'reference', id
"""

# The other direction: the intents behind a page of the provider's charges, looked
# up by idempotency key outside the audit's snapshot (an intent is committed before
# its executor submits, so any charge's intent is visible to a fresh statement).
INTENTS_BY_KEY = """
SELECT idempotency_key, tenant_id, consumer, id, state, provider_ref
  FROM handoff.effect_intents
 WHERE effect = %(effect)s AND idempotency_key = ANY(%(keys)s)
"""
