"""What a rehearsal row captures: the order, guard rows, intents and their history,
quarantine entries (the acknowledgement history) and the provider's own records."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

ORDER = """
SELECT run_id, version, owner, status FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND document_id = %(doc)s ORDER BY run_id
"""
GUARDS = """
SELECT event_id, version, taken_at FROM handoff.consumer_guards
 WHERE tenant_id = %(tenant)s AND consumer = %(consumer)s AND document_id = %(doc)s
 ORDER BY version
"""
INTENTS = """
SELECT id, event_id, effect, idempotency_key, business_key, state, reconciliation, attempts,
       provider_ref, request
  FROM handoff.effect_intents
 WHERE tenant_id = %(tenant)s AND document_id = %(doc)s ORDER BY id
"""
HISTORY = """
SELECT h.intent_id, h.actor, h.from_state, h.to_state, h.detail
  FROM handoff.effect_history h JOIN handoff.effect_intents i
    ON i.tenant_id = h.tenant_id AND i.id = h.intent_id
 WHERE i.tenant_id = %(tenant)s AND i.document_id = %(doc)s ORDER BY h.at, h.id
"""
QUARANTINE = """
SELECT id, event_id, category, status, attempts FROM handoff.quarantine
 WHERE tenant_id = %(tenant)s AND document_id = %(doc)s ORDER BY id
"""


def capture(
    admin: psycopg.Connection[Any],
    provider: httpx.Client,
    *,
    tenant: str,
    consumer: str,
    document_id: str,
) -> dict[str, Any]:
    params = {"tenant": tenant, "consumer": consumer, "doc": document_id}
    found: dict[str, Any] = {}
    with admin.cursor(row_factory=dict_row) as cur:
        for name, query in (
            ("order", ORDER),
            ("guards", GUARDS),
            ("intents", INTENTS),
            ("intent_history", HISTORY),
            ("quarantine", QUARANTINE),
        ):
            found[name] = cur.execute(query, params).fetchall()
    answer = provider.get("/v1/payments", params={"reference": document_id})
    answer.raise_for_status()
    found["provider_records"] = answer.json()["payments"]
    return found
