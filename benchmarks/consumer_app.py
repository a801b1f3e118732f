"""The consumer the benchmark runs: ``handoff consume benchmarks.consumer_app:app``.

A trivial local effect (one INSERT) per event, for any owner's "created"
events; with ``BENCH_NEXT`` set it also hands each document on (the hop).
The effect row keeps the event's ``occurredAt`` (its emit's commit, within
a transaction's length) and the clock at the handler's end (just before its
commit), which is the hop latency.
"""

from __future__ import annotations

import os

from handoff.consumers import Consumer, Event
from handoff.core import HandoffTx

EFFECTS_DDL = """
CREATE SCHEMA IF NOT EXISTS handoff_bench;
CREATE TABLE IF NOT EXISTS handoff_bench.effects (
    tenant_id   text        NOT NULL,
    consumer    text        NOT NULL,
    event_id    text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    done_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT USAGE ON SCHEMA handoff_bench TO handoff_service;
GRANT INSERT ON handoff_bench.effects TO handoff_service;
"""

NAME = os.environ.get("BENCH_CONSUMER", "bench-batched")
NEXT = os.environ.get("BENCH_NEXT")

app = Consumer(NAME, owner=NAME if NEXT else None)


@app.handler("created")
def effect(event: Event, tx: HandoffTx) -> None:
    if NEXT:
        tx.emit(
            event_id=event.next_event_id("hop"),
            event_type="hopped",
            document_id=event.document_id,
            next_owner=NEXT,
            status="hopped",
            expected_version=event.version,
            causation_id=event.event_id,
        )
    tx.append(
        "handoff_bench.effects",
        ("tenant_id", "consumer", "event_id", "occurred_at"),
        (event.tenant_id, NAME, event.event_id, event.occurred_at),
    )
