"""The consumer the benchmark runs: ``handoff consume benchmarks.consumer_app:app``.

A trivial local effect (one INSERT) per event, for any owner's "created"
events; with ``BENCH_NEXT`` set it also hands each document on (the hop).
The effect row keeps the event's ``occurredAt`` (its emit's commit, within
a transaction's length) and the clock at the handler's end (just before its
commit), which is the hop latency.

With ``BENCH_TRACE`` (a file path) the row also keeps the hop's other marks
(the relay's timing headers, the broker's append, the poll, the handler's
start), and each unit's commit time is appended to the file as
``<event id> <epoch seconds>`` lines: the hop benchmark's breakdown
(benchmarks/hop.py).
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import IO

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
ALTER TABLE handoff_bench.effects
    ADD COLUMN IF NOT EXISTS fetched_us  bigint,
    ADD COLUMN IF NOT EXISTS produced_us bigint,
    ADD COLUMN IF NOT EXISTS appended_ms bigint,
    ADD COLUMN IF NOT EXISTS received_at double precision,
    ADD COLUMN IF NOT EXISTS started_at  double precision;
GRANT USAGE ON SCHEMA handoff_bench TO handoff_service;
GRANT INSERT ON handoff_bench.effects TO handoff_service;
"""

NAME = os.environ.get("BENCH_CONSUMER", "bench-batched")
NEXT = os.environ.get("BENCH_NEXT")
TRACE = os.environ.get("BENCH_TRACE")

app = Consumer(NAME, owner=NAME if NEXT else None)
# Event ids handled and not yet reported committed, in the order handled. Units sent
# ahead (consumers/queued.py) run the next unit's handler before this one commits: the
# after-commit hook takes as many as its unit had events, from the front. (A unit
# taken again after a failure would hand its events twice; the hop sees none.)
_uncommitted: deque[str] = deque()
_trace: IO[str] | None = open(TRACE, "a", buffering=1) if TRACE else None  # noqa: SIM115


@app.handler("created")
def effect(event: Event, tx: HandoffTx) -> None:
    started = time.time()
    if NEXT:
        # Not waiting for the answer: the handoff goes in the unit's commit message.
        tx.hand_on(event, "hopped", to=NEXT, status="hopped", step="hop", wait=False)
    if _trace is None:
        tx.append(
            "handoff_bench.effects",
            ("tenant_id", "consumer", "event_id", "occurred_at"),
            (event.tenant_id, NAME, event.event_id, event.occurred_at),
        )
        return
    marks = event.position.headers
    tx.append(
        "handoff_bench.effects",
        ("tenant_id", "consumer", "event_id", "occurred_at", "fetched_us", "produced_us",
         "appended_ms", "received_at", "started_at"),
        (event.tenant_id, NAME, event.event_id, event.occurred_at,
         int(marks.get("relayFetchedAt") or 0) or None,
         int(marks.get("relayProducedAt") or 0) or None,
         event.position.timestamp_ms, event.position.received_at, started),
    )  # fmt: skip
    _uncommitted.append(event.event_id)


@app.after_commit
def committed(events: int) -> None:
    if _trace is not None and _uncommitted:
        now = time.time()
        done = [_uncommitted.popleft() for _ in range(min(events, len(_uncommitted)))]
        _trace.write("".join(f"{event_id} {now:.6f}\n" for event_id in done))
