"""The chaos verdict's statements: what one run's tenant left in the database."""

from __future__ import annotations

# Every document final (owner NULL, or a planted poison), nothing unpublished,
# no intent on its way, and how many documents wait in quarantine.
DRAIN_STATE = """
SELECT (SELECT count(*) FROM handoff.document_state WHERE tenant_id = %(t)s
          AND owner IS NOT NULL AND NOT document_id = ANY(%(p)s)),
       (SELECT count(*) FROM handoff.outbox_pending WHERE tenant_id = %(t)s)
       + (SELECT count(*) FROM handoff.outbox WHERE tenant_id = %(t)s
          AND parked_at IS NOT NULL),
       (SELECT count(*) FROM handoff.effect_intents WHERE tenant_id = %(t)s
          AND state NOT IN ('succeeded', 'failed')),
       (SELECT count(DISTINCT document_id) FROM handoff.quarantine WHERE tenant_id = %(t)s
          AND status IN ('open', 'retry'))
"""

STORED_EVENTS = """
SELECT count(*) FROM handoff.document_history WHERE tenant_id = %s AND event_id = ANY(%s)
"""

STATES = """
SELECT document_id, owner, status, version FROM handoff.document_state
 WHERE tenant_id = %s AND run_id = 1
"""

VERSION_SPANS = """
SELECT document_id, count(DISTINCT version), min(version), max(version)
  FROM handoff.document_history WHERE tenant_id = %s AND run_id = 1 GROUP BY 1
"""

QUARANTINED = """
SELECT DISTINCT document_id FROM handoff.quarantine
 WHERE tenant_id = %s AND status IN ('open', 'retry')
"""

UNSETTLED_EFFECTS = """
SELECT count(*) FROM handoff.effect_intents WHERE tenant_id = %s
   AND (state NOT IN ('succeeded', 'failed') OR reconciliation = 'unresolved')
"""

INTENTS = """
SELECT idempotency_key, document_id, state FROM handoff.effect_intents WHERE tenant_id = %s
"""

KNOWN_KEYS = "SELECT count(*) FROM handoff.effect_intents WHERE idempotency_key = ANY(%s)"
