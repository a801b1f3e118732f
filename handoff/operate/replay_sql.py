"""Statements of the replay family (plans, items, skipped capabilities, audit)."""

from __future__ import annotations

PLAN = """
SELECT name, tenant_id, consumer, manifest, revision, status, approved_revision, approved_by,
       approved_at, stop_requested, stop_reason, checkpoint, runner, created_at, started_at,
       updated_at, finished_at
  FROM handoff.replay_plans WHERE name = %(name)s
"""

# A new plan, or a new revision of one that has not started: a changed
# manifest loses its approval (the revision differs).
SAVE = """
INSERT INTO handoff.replay_plans AS p (name, tenant_id, consumer, manifest, revision)
VALUES (%(name)s, %(tenant)s, %(consumer)s, %(manifest)s, %(revision)s)
ON CONFLICT (name) DO UPDATE
   SET tenant_id = EXCLUDED.tenant_id, consumer = EXCLUDED.consumer,
       manifest = EXCLUDED.manifest, revision = EXCLUDED.revision,
       status = CASE WHEN p.approved_revision = EXCLUDED.revision THEN 'approved'
                     ELSE 'planned' END,
       updated_at = now()
 WHERE p.status IN ('planned', 'approved')
RETURNING status
"""

APPROVE = """
UPDATE handoff.replay_plans
   SET status = 'approved', approved_revision = revision, approved_by = %(by)s,
       approved_at = now(), updated_at = now()
 WHERE name = %(name)s AND revision = %(revision)s AND status IN ('planned', 'approved')
RETURNING name
"""

# Taken by one runner at a time: the status moves only from a startable one.
START = """
UPDATE handoff.replay_plans
   SET status = 'running', stop_requested = false, stop_reason = NULL, runner = %(runner)s,
       started_at = coalesce(started_at, now()), updated_at = now(), finished_at = NULL
 WHERE name = %(name)s AND status = ANY(%(from)s) AND approved_revision = revision
RETURNING checkpoint
"""

FINISH = """
UPDATE handoff.replay_plans
   SET status = %(status)s, stop_reason = %(reason)s, updated_at = now(),
       finished_at = CASE WHEN %(status)s = 'completed' THEN now() END
 WHERE name = %(name)s AND status = 'running'
"""

REQUEST_STOP = """
UPDATE handoff.replay_plans SET stop_requested = true, updated_at = now()
 WHERE name = %(name)s AND status = 'running'
RETURNING name
"""

AUDIT = """
INSERT INTO handoff.replay_audit (plan, actor, action, revision, detail)
VALUES (%(name)s, %(actor)s, %(action)s, %(revision)s, %(detail)s)
"""

AUDIT_TRAIL = """
SELECT at, actor, action, revision, detail FROM handoff.replay_audit
 WHERE plan = %(name)s ORDER BY id
"""

# Outcomes so far; completed records whose effect is now unresolved count as
# unresolved (the effect's outcome is what the owner must settle). The plan's
# unresolved effects come first, on their own: the plan's tables stay on the
# coordinator, and on Citus a join of them with a distributed table is refused;
# a CTE of one tenant's effects is one worker's query whose rows then meet the
# plan's there.
OUTCOMES = """
WITH unresolved AS MATERIALIZED (
    SELECT e.event_id FROM handoff.effect_intents e
     WHERE e.tenant_id = %(tenant)s AND e.consumer = %(consumer)s
       AND e.reconciliation = 'unresolved')
SELECT CASE WHEN i.outcome = 'completed'
                 AND i.event_key IN (SELECT event_id FROM unresolved)
            THEN 'unresolved' ELSE i.outcome END AS outcome,
       count(*)::bigint AS n
  FROM handoff.replay_items i
 WHERE i.plan = %(name)s
 GROUP BY 1
"""

SKIPPED = """
SELECT capability, count(*)::bigint AS n FROM handoff.replay_skipped
 WHERE plan = %(name)s GROUP BY 1 ORDER BY 1
"""

# The event ids a plan names that no record met (event-id plans only).
MISSING_IDS = """
SELECT id FROM jsonb_array_elements_text(%(ids)s) AS id
 WHERE NOT EXISTS (SELECT 1 FROM handoff.replay_items i
                    WHERE i.plan = %(name)s AND i.event_key = id)
 ORDER BY 1
"""

# Where a set of event ids lies in time, from the outbox (kept at least as
# long as the replay window, see handoff retention).
ID_WINDOW = """
SELECT count(*)::bigint AS found, min(o.created_at) AS since,
       max(CASE WHEN o.id <= c.published_upto AND o.parked_at IS NULL THEN c.moved_at
                ELSE now() END) AS until
  FROM handoff.outbox o JOIN handoff.relay_cursors c ON c.slot = o.slot
 WHERE o.tenant_id = %(tenant)s AND o.event_id = ANY(%(ids)s)
"""
# On Citus the relay keeps no bounds but marks each row it published: a row's
# mark is when it left (unmarked or parked: not yet). One tenant: one shard.
CITUS_ID_WINDOW = """
SELECT count(*)::bigint AS found, min(created_at) AS since,
       max(coalesce(published_at, now())) AS until
  FROM handoff.outbox
 WHERE tenant_id = %(tenant)s AND event_id = ANY(%(ids)s)
"""

# As the consumer's service, in its unit (SECURITY DEFINER functions).
RECORD = "SELECT handoff.replay_record(%(name)s, %(items)s, %(checkpoint)s)"
SKIP = "SELECT handoff.replay_skip(%(name)s, %(event_id)s, %(capability)s)"
STOPPING = "SELECT handoff.replay_stopping(%(name)s)"
