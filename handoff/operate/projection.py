"""``handoff projection``: rebuild a latest-state projection of documents from Kafka.

A rebuild reads a topic from its first retained offset up to its end when
the rebuild starts (a fixed cut-off, recorded), decodes each event through
the registry and keeps, per document run, the event with the highest
version: events carry the full state (owner, status, deadline, data), so
the last one is the state. It writes into a schema of its own, never into
Handoff's tables, and nothing customer-facing reads it until ``switch``
points the readers' view (``handoff_read.documents``) at it, which is
refused while the last comparison found differences (``--force`` to
override, on purpose).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import KafkaError, TopicPartition
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from handoff.consumers.decoding import Decoder, reader_schema
from handoff.consumers.event import Position
from handoff.core.db import translated
from handoff.core.errors import (
    ConfigurationError,
    InvalidRequest,
    MalformedEvent,
    ProjectionRefused,
)
from handoff.core.kafka import reader
from handoff.core.settings import HandoffSettings
from handoff.operate import projection_sql as q
from handoff.operate.manifest import Positions

NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
BATCH = 1000


def _checked(name: str) -> str:
    if not NAME.fullmatch(name):
        raise InvalidRequest(f"projection name {name!r}: 1-40 of a-z, 0-9, _; a letter first")
    return name


def _exists(conn: psycopg.Connection[Any], name: str) -> bool:
    return conn.execute(q.EXISTS, {"schema": q.SCHEMA_PREFIX + name}).fetchone() is not None


@dataclass
class Rebuilt:
    events: int
    undecodable: int
    seconds: float


def rebuild(
    settings: HandoffSettings,
    name: str,
    *,
    topic: str,
    tenant: str | None = None,
    progress: Callable[[int, int], None] = lambda _done, _total: None,
) -> Rebuilt:
    """Read ``topic`` up to its end now into a new projection ``name``."""
    _checked(name)
    started = time.monotonic()
    with Positions(settings.kafka_bootstrap, topic) as positions:
        ends = {p: positions.end(p) for p in positions.partitions()}
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        if _exists(conn, name):
            raise ProjectionRefused(f"projection {name} exists; drop it or choose another name")
        with translated(), conn.transaction():
            conn.execute(q.create(name))
            conn.execute(q.record_start(name),
                         {"topic": topic, "tenant": tenant, "ends": Jsonb(ends)})  # fmt: skip
        events, undecodable = _read(settings, conn, name, topic, tenant, ends, progress)
        with translated():
            conn.execute(q.finish(name), {"events": events})
    return Rebuilt(events, undecodable, time.monotonic() - started)


def _read(
    settings: HandoffSettings,
    conn: psycopg.Connection[Any],
    name: str,
    topic: str,
    tenant: str | None,
    ends: dict[int, int],
    progress: Callable[[int, int], None],
) -> tuple[int, int]:
    total = sum(ends.values())
    pending = {p for p, end in ends.items() if end > 0}
    decoder = Decoder(settings.schema_registry_url, reader_schema(None))
    kafka = reader(settings.kafka_bootstrap, f"handoff-projection-{name}", eof=True)
    # From the first retained offset of each partition (OFFSET_BEGINNING: -2).
    kafka.assign([TopicPartition(topic, p, -2) for p in sorted(pending)])
    statement = q.upsert(name)
    batch: list[dict[str, Any]] = []
    seen = events = undecodable = 0
    try:
        while pending:
            msg = kafka.poll(1.0)
            if msg is None:
                continue
            problem = msg.error()
            if problem is not None:
                if problem.code() == KafkaError._PARTITION_EOF:
                    # At the end: done with it, even when its last offsets are not
                    # messages (transaction markers are never delivered).
                    pending.discard(msg.partition() or 0)
                    continue
                raise ConfigurationError(f"projection {name}: Kafka: {problem}")
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if partition not in pending:
                continue
            if offset >= ends[partition] - 1:
                pending.discard(partition)
                kafka.pause([TopicPartition(topic, partition)])
                if offset >= ends[partition]:
                    continue
            seen += 1
            try:
                event = decoder.decode(msg.value(), Position(topic, partition, offset))
            except MalformedEvent:
                undecodable += 1
                continue
            if tenant is not None and event.tenant_id != tenant:
                continue
            events += 1
            batch.append({
                "tenant_id": event.tenant_id, "document_id": event.document_id,
                "run_id": event.run_id, "version": event.version, "event_id": event.event_id,
                "owner": event.owner, "status": event.status, "assigned_at": event.assigned_at,
                "due_at": event.due_at, "completed_at": event.completed_at,
                "data": Jsonb(event.data), "occurred_at": event.occurred_at,
            })  # fmt: skip
            if len(batch) >= BATCH:
                _write(conn, statement, batch)
                progress(seen, total)
        _write(conn, statement, batch)
        progress(seen, total)
    finally:
        kafka.close()
        decoder.close()
    return events, undecodable


def _write(conn: psycopg.Connection[Any], statement: Any, batch: list[dict[str, Any]]) -> None:
    if not batch:
        return
    with translated(), conn.transaction(), conn.cursor() as cur:
        cur.executemany(statement, batch)
    batch.clear()


@dataclass
class Comparison:
    counts: list[dict[str, Any]]
    differences: int
    sample: list[dict[str, Any]] = field(default_factory=list)

    @property
    def count_mismatches(self) -> list[dict[str, Any]]:
        return [c for c in self.counts if c["projected"] != c["authoritative"]]


def compare(
    conn: psycopg.Connection[Any], name: str, *, tenant: str | None = None, keep: int = 20
) -> Comparison:
    """Entity counts per tenant and owner, and the documents whose latest state differs."""
    if not _exists(conn, _checked(name)):
        raise ProjectionRefused(f"no projection named {name}")
    params = {"tenant": tenant}
    with translated(), conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(q.REPEATABLE_READ)  # the counts and the differences: one snapshot
        counts = cur.execute(q.counts(name), params).fetchall()
        found = Comparison(counts, 0)
        with conn.cursor(name="projection_diff", row_factory=dict_row) as rows:
            rows.itersize = 1000
            rows.execute(q.differences(name), params)
            for row in rows:
                found.differences += 1
                if len(found.sample) < keep:
                    found.sample.append(row)
        cur.execute(q.set_differences(name), {"n": found.differences})
    return found


def switch(conn: psycopg.Connection[Any], name: str, *, force: bool = False) -> None:
    """Point the readers' view at projection ``name``, atomically."""
    if not _exists(conn, _checked(name)):
        raise ProjectionRefused(f"no projection named {name}")
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        state = cur.execute(q.state(name)).fetchone()
    assert state is not None
    if state["finished_at"] is None:
        raise ProjectionRefused(f"projection {name} did not finish rebuilding")
    if not force and state["differences"] is None:
        raise ProjectionRefused(f"compare {name} first (handoff projection compare {name})")
    if not force and state["differences"]:
        raise ProjectionRefused(
            f"projection {name} differed from the authoritative tables in "
            f"{state['differences']} document(s) at its last comparison; --force to switch anyway"
        )
    with translated(), conn.transaction():
        conn.execute(q.switch(name))


def current(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(q.CURRENT).fetchone()
    return str(row[0]).removeprefix("projection ") if row and row[0] else None


def listing(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    names = [r[0] for r in conn.execute(q.LIST).fetchall()]
    out = []
    for name in names:
        with conn.cursor(row_factory=dict_row) as cur:
            state = cur.execute(q.state(name)).fetchone() or {}
        out.append({"name": name, **state})
    return out


def drop(conn: psycopg.Connection[Any], name: str) -> None:
    if not _exists(conn, _checked(name)):
        raise ProjectionRefused(f"no projection named {name}")
    if current(conn) == name:
        raise ProjectionRefused(f"readers use projection {name}; switch them first")
    with translated():
        conn.execute(q.drop(name))
