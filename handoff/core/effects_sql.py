"""Named statements of the effect ledger and workflow-run family (handoff/sql/effects.sql).

The service-side statements call the SECURITY DEFINER functions, which take
the consumer from the session; the operator statements (list, show,
resolve) run as the admin role.
"""

from __future__ import annotations

INTEND = """
SELECT id, idempotency_key, state, created, event_id, business_key
  FROM handoff.effect_intend(%(event_id)s, %(effect)s, %(document_id)s, %(run_id)s,
                             %(request)s, %(business_key)s)
"""

# The same, naming the unit's tenant (handed to its worker on Citus: by_tenant.sql).
INTEND_FOR = """
SELECT id, idempotency_key, state, created, event_id, business_key
  FROM handoff.effect_intend_for(%(tenant)s, %(event_id)s, %(effect)s, %(document_id)s,
                                 %(run_id)s, %(request)s, %(business_key)s)
"""

CLAIM = """
SELECT id, effect, idempotency_key, request, document_id, run_id, event_id, claim, attempts,
       lookups, needs_lookup, submitted, recovered
  FROM handoff.effect_claim(%(worker)s, %(lease_s)s, %(limit)s, %(submit)s)
"""

# The claimed intents' trace contexts, read only by an executor with tracing on.
TRACES = "SELECT id, traceparent FROM handoff.effect_traces(%(ids)s::bigint[])"

SUBMITTING = "SELECT handoff.effect_submitting(%(id)s, %(claim)s)"

RECORD = """
SELECT handoff.effect_record(%(id)s, %(claim)s, %(state)s, %(reconciliation)s,
                             %(provider_ref)s, %(outcome)s, %(error)s, %(retry_in_s)s,
                             %(lookup_failed)s, %(detail)s)
"""

# Hand back an intent claimed and never sent (effect_release.sql): as it was before the
# claim when the claim marked it submitted (marked), else "intended" again.
RELEASE = "SELECT handoff.effect_release(%(id)s, %(claim)s, %(marked)s, %(detail)s)"
RELEASE_FOR = """
SELECT handoff.effect_release_for(%(tenant)s, %(id)s, %(claim)s, %(marked)s, %(detail)s)
"""

# Several answers in one statement (one transaction): the executors of a process record
# together (consumers/records.py). On one PostgreSQL only; on Citus each answer is a
# RECORD_FOR of its own, handed whole to the tenant's worker. Answers each record's
# ordinal (from 0, in the arrays' order) and whether it was recorded (false: fenced out).
RECORD_COLUMNS = ("id", "claim", "state", "reconciliation", "provider_ref", "outcome", "error",
                  "retry_in_s", "lookup_failed", "detail")  # fmt: skip
RECORD_MANY = """
SELECT r.n - 1,
       handoff.effect_record(r.id, r.claim, r.state, r.reconciliation, r.provider_ref,
                             r.outcome, r.error, r.retry_in_s, r.lookup_failed, r.detail)
  FROM unnest(%(id)s::bigint[], %(claim)s::integer[], %(state)s::text[],
              %(reconciliation)s::text[], %(provider_ref)s::text[], %(outcome)s::jsonb[],
              %(error)s::text[], %(retry_in_s)s::double precision[],
              %(lookup_failed)s::boolean[], %(detail)s::text[])
       WITH ORDINALITY AS r(id, claim, state, reconciliation, provider_ref, outcome, error,
                            retry_in_s, lookup_failed, detail, n)
"""

# The same three naming the executor's tenant (effects_by_tenant.sql): on Citus
# each is handed whole to the tenant's worker.
CLAIM_FOR = """
SELECT id, effect, idempotency_key, request, document_id, run_id, event_id, claim, attempts,
       lookups, needs_lookup, submitted, recovered
  FROM handoff.effect_claim_for(%(tenant)s, %(worker)s, %(lease_s)s, %(limit)s, %(submit)s)
"""
SUBMITTING_FOR = "SELECT handoff.effect_submitting_for(%(tenant)s, %(id)s, %(claim)s)"
RECORD_FOR = """
SELECT handoff.effect_record_for(%(tenant)s, %(id)s, %(claim)s, %(state)s, %(reconciliation)s,
                                 %(provider_ref)s, %(outcome)s, %(error)s, %(retry_in_s)s,
                                 %(lookup_failed)s, %(detail)s)
"""

WORKFLOW_START = """
SELECT execution_name, started_at, created
  FROM handoff.workflow_start(%(workflow)s, %(name)s, %(document_id)s, %(run_id)s,
                              %(event_id)s, %(input)s)
"""

WORKFLOW_START_FOR = """
SELECT execution_name, started_at, created
  FROM handoff.workflow_start_for(%(tenant)s, %(workflow)s, %(name)s, %(document_id)s,
                                  %(run_id)s, %(event_id)s, %(input)s)
"""

# The calling service's open intents by state, and 'unresolved' (its metrics).
PENDING = "SELECT state, n, oldest_s FROM handoff.effect_pending()"
OPEN_STATES = ("intended", "claimed", "submitted", "unknown")

# -- operators (admin role) --------------------------------------------------------

COLUMNS = """
id, tenant_id, consumer, event_id, effect, idempotency_key, business_key, document_id, run_id,
state, reconciliation, attempts, lookups, claimed_by, lease_until, next_attempt_at,
provider_ref, owner, created_at, submitted_at, completed_at, updated_at, left(error, 300) AS error
"""

# Newest first; filters are optional (NULL matches all).
LIST = f"""
SELECT {COLUMNS}
  FROM handoff.effect_intents
 WHERE (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
   AND (%(consumer)s::text IS NULL OR consumer = %(consumer)s)
   AND (%(document)s::text IS NULL OR document_id = %(document)s)
   AND (%(state)s::text IS NULL OR state = %(state)s)
   AND (NOT %(unresolved)s OR reconciliation = 'unresolved')
 ORDER BY id DESC
 LIMIT %(limit)s
"""

SHOW = f"SELECT {COLUMNS}, request, outcome FROM handoff.effect_intents WHERE id = %(id)s"

# By time, then id: see quarantine_sql.AUDIT.
HISTORY = """
SELECT at, actor, from_state, to_state, detail FROM handoff.effect_history
 WHERE intent_id = %(id)s ORDER BY at, id
"""

# A person names an intent by id; its tenant is looked up first, so that the
# decision's statements name it (on Citus: one shard, and the row lock that
# FOR UPDATE needs).
TENANT_OF = "SELECT tenant_id FROM handoff.effect_intents WHERE id = %(id)s"

# Row-locked: a person's decision and an executor's record apply one after the other.
LOCK = """
SELECT state, reconciliation FROM handoff.effect_intents
 WHERE tenant_id = %(tenant)s AND id = %(id)s FOR UPDATE
"""

# A person's decision on an unresolved intent: sent back to the executors (a
# fresh lookup comes first), or settled as succeeded or failed. Two statements,
# not one with CASE: Citus refuses a non-immutable function (now()) in a CASE
# of a write.
RESOLVE_RETRY = """
UPDATE handoff.effect_intents
   SET state = 'unknown', reconciliation = 'pending',
       provider_ref = coalesce(%(provider_ref)s, provider_ref), lookups = 0,
       claim = claim + 1, lease_until = NULL, next_attempt_at = now(), completed_at = NULL,
       updated_at = now()
 WHERE tenant_id = %(tenant)s AND id = %(id)s
"""
RESOLVE_SETTLED = """
UPDATE handoff.effect_intents
   SET state = %(state)s, reconciliation = 'resolved',
       provider_ref = coalesce(%(provider_ref)s, provider_ref),
       claim = claim + 1, lease_until = NULL, next_attempt_at = now(), completed_at = now(),
       updated_at = now()
 WHERE tenant_id = %(tenant)s AND id = %(id)s
"""

RECORD_DECISION = """
INSERT INTO handoff.effect_history (tenant_id, intent_id, actor, from_state, to_state, detail)
VALUES (%(tenant)s, %(id)s, %(actor)s, %(from_state)s, %(to_state)s, %(detail)s)
"""
