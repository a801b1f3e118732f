"""On Citus a consumer's units are not sent ahead (consumers/queued.py): statements up to
a Sync are no transaction block there, and a claim handed to the tenant's worker would
commit by itself. Every unit goes the usual way, as one transaction."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.fix_consumer import effects, noted_unless_bad, quarantined


def test_units_are_not_sent_ahead_and_a_failing_unit_leaves_neither_guard_nor_effect(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(1, "bad")
    p = story(1, "good")

    consumer = audit(noted_unless_bad, max_deliveries=2)
    assert consumer.processor.queueable is False
    assert consumer.queue(p["bad", 1, 1], p["good", 1, 1]) == [0, 1]
    assert [d for _, d, *_ in effects(admin, tenant)] == ["good"]
    # The failed unit committed nothing: its event was tried again and set aside, not
    # taken for a duplicate of a guard row left behind.
    [entry] = quarantined(admin, tenant)
    assert (entry["document_id"], entry["attempts"]) == ("bad", 2)
    prepared = consumer.conn.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'handoff_unit_%'"
    ).fetchone()
    assert prepared == (0,)
