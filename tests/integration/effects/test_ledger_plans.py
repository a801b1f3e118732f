"""The executor's ledger calls find their rows by index whatever the statistics say.

A burst of intents written before autovacuum's next ANALYZE left effect_claim
sorting the consumer's every intent and effect_record walking them to find one
(6.6 ms and 1.3 ms a call at 4,000 intents, measured with pg_stat_statements);
migration 0026_effect_plans. PL/pgSQL keeps a generic plan after five calls,
so each call is made a few more times than that before it is measured.
"""

from __future__ import annotations

from typing import Any

import psycopg

from handoff.core import effects_sql as ledger
from handoff.core.effects import intend
from handoff.core.settings import HandoffSettings
from tests.fix_contract import ServiceFactory, login

BURST = 3_000  # intents in one transaction, not yet in the table's statistics
CALLS = 8  # more than the five custom plans PL/pgSQL makes before a generic one
FETCHED = """
SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = 'handoff.effect_intents'::regclass
"""


def _fetched(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> tuple[Any, int]:
    """``query``'s rows, and the intents it fetched through an index, in a transaction."""
    with conn.transaction():
        # Pending counts (since the backend last reported them), so a difference.
        before = _count(conn)
        rows = conn.execute(query, params).fetchall()  # type: ignore[call-overload]
        return rows, _count(conn) - before


def _count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(FETCHED).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _succeeded(claimed: tuple[Any, ...]) -> dict[str, Any]:
    """effect_record's parameters for a claimed intent (ledger.CLAIM's row) that succeeded."""
    return {"id": claimed[0], "claim": claimed[7], "state": "succeeded", "reconciliation": None,
            "provider_ref": f"p-{claimed[0]}", "outcome": None, "error": None,
            "retry_in_s": 0.0, "lookup_failed": False, "detail": None}  # fmt: skip


def test_a_burst_of_intents_is_claimed_and_recorded_by_index(
    service: ServiceFactory, migrated: HandoffSettings
) -> None:
    cred = service("planned")
    with login(migrated, cred.role, cred.secret) as conn:
        with conn.transaction():
            for n in range(BURST):
                request = {"amount": n + 1, "currency": "EUR", "reference": f"d-{n}"}
                intend(conn, event_id=f"e-{n}", effect="pay", document_id=f"d-{n}", run_id=1,
                       request=request)  # fmt: skip
        claim = {"worker": "w", "lease_s": 60.0, "limit": 1, "submit": True}
        claims = [_fetched(conn, ledger.CLAIM, claim) for _ in range(CALLS)]
        records = [_fetched(conn, ledger.RECORD, _succeeded(rows[0])) for rows, _ in claims]
    assert all(rows == [(True,)] for rows, _ in records)
    # A claim reads its candidates and its one row; a record its one row. Walking the
    # consumer's intents read all 3,000 of them, in every call after the fifth.
    assert max(fetched for _, fetched in claims) < 20, [f for _, f in claims]
    assert max(fetched for _, fetched in records) < 10, [f for _, f in records]
