"""The proof after a chaos run, from outside as well as with the audit.

- 0 lost: every receipt the load generator was given is in the database.
- 0 doubled: one charge at the provider per paid document, none without a
  succeeded intent.
- every document in its final state (paid, or quarantined poison at routing),
  versions gapless, every version on the topic in order per document.
- nothing quarantined but the planted poison; no effect left unresolved.
- ``handoff audit --provider pay=<sandbox>`` finds nothing.

Rows are read a page at a time and only per-document summaries are kept, so
a long run's verdict does not hold its tables or topic in memory.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from handoff.chaos import verdict_sql as q
from handoff.chaos.pipeline import PAID_VERSION
from handoff.consumers.decoding import Decoder, reader_schema
from handoff.consumers.event import Event, Position
from handoff.consumers.providers import SandboxPayments
from handoff.core import kafka
from handoff.core.errors import Unavailable
from handoff.core.models import Receipt
from handoff.core.settings import HandoffSettings
from handoff.operate.audit import audit, handoff_key

CHUNK = 1000


@dataclass
class Verdict:
    documents: int = 0
    lost: int = 0
    doubled: int = 0
    charged_without_intent: int = 0
    unpaid: list[str] = field(default_factory=list)  # not in their final state
    gaps: list[str] = field(default_factory=list)  # versions not 1..n in the history
    out_of_order: list[str] = field(default_factory=list)  # on the topic
    unexpected_quarantine: list[str] = field(default_factory=list)
    poison_not_quarantined: list[str] = field(default_factory=list)
    unresolved_effects: int = 0
    audit_breaches: int = 0
    audit_failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost or self.doubled or self.charged_without_intent or self.unpaid or self.gaps
            or self.out_of_order or self.unexpected_quarantine or self.poison_not_quarantined
            or self.unresolved_effects or self.audit_breaches
        )  # fmt: skip

    def breaches(self) -> list[str]:
        said = []
        for name, value in (
            ("lost receipts", self.lost),
            ("doubled charges", self.doubled),
            ("charges without a succeeded intent", self.charged_without_intent),
            ("documents not in their final state", self.unpaid),
            ("documents with version gaps", self.gaps),
            ("documents out of order on the topic", self.out_of_order),
            ("quarantined beyond the planted poison", self.unexpected_quarantine),
            ("planted poison not quarantined", self.poison_not_quarantined),
            ("unresolved effects", self.unresolved_effects),
            ("audit breaches", self.audit_breaches),
        ):
            count = len(value) if isinstance(value, list) else value
            if count:
                sample = f" (e.g. {', '.join(value[:3])})" if isinstance(value, list) else ""
                said.append(f"{count} {name}{sample}")
        return said


def _rows(conn: psycopg.Connection[Any], sql: str, *params: Any) -> Iterator[tuple[Any, ...]]:
    with conn.cursor(name=f"chaos_{uuid.uuid4().hex[:8]}") as cur:
        cur.itersize = CHUNK
        cur.execute(sql, params)
        yield from cur


def drained(conn: psycopg.Connection[Any], tenant: str, poison: set[str]) -> bool:
    """Every document final (paid, or poison quarantined), nothing pending anywhere."""
    row = conn.execute(q.DRAIN_STATE, {"t": tenant, "p": list(poison)}).fetchone()
    assert row is not None
    owned, pending, effects, quarantined = (int(v) for v in row)
    return owned == 0 and pending == 0 and effects == 0 and quarantined >= len(poison)


def judge(
    settings: HandoffSettings, tenant: str, topic: str, sandbox_url: str,
    receipts: dict[str, Receipt], poison: set[str], say: Callable[[str], None],
) -> Verdict:  # fmt: skip
    verdict = Verdict(documents=len(receipts))
    with psycopg.connect(settings.database_url, autocommit=False) as conn:
        say("checking receipts, states and versions in the database…")
        _receipts(conn, tenant, receipts, verdict)
        last = _states(conn, tenant, poison, verdict)
        _quarantine_and_effects(conn, tenant, poison, verdict)
        conn.commit()
        say("checking charges at the provider…")
        _charges(conn, tenant, sandbox_url, verdict)
        conn.commit()
        say("running handoff audit --provider pay=…")
        report = audit(conn, tenant=tenant, providers={"pay": sandbox_url})
        conn.commit()
    verdict.audit_breaches = report.breaches
    verdict.audit_failed = [f.check for f in report.findings if not f.ok]
    say("reading every event of the run back from the topic…")
    _topic(settings, topic, tenant, last, verdict)
    return verdict


def _receipts(
    conn: psycopg.Connection[Any], tenant: str, receipts: dict[str, Receipt], verdict: Verdict
) -> None:
    ids = [r.event_id for r in receipts.values()]
    verdict.lost += len(ids) - _found(conn, q.STORED_EVENTS, ids, tenant)


def _found(conn: psycopg.Connection[Any], sql: str, values: list[str], *lead: Any) -> int:
    """How many of ``values`` a counting statement finds, asked a chunk at a time."""
    found = 0
    for start in range(0, len(values), CHUNK):
        row = conn.execute(sql, (*lead, values[start : start + CHUNK])).fetchone()
        found += int(row[0] if row else 0)
    return found


def _states(
    conn: psycopg.Connection[Any], tenant: str, poison: set[str], verdict: Verdict
) -> dict[str, int]:
    """Final states and gapless versions; returns each document's last version."""
    last: dict[str, int] = {}
    for doc, owner, status, version in _rows(conn, q.STATES, tenant):
        last[doc] = int(version)
        final = (
            (owner, version) == ("routing", 1)
            if doc in poison
            else (owner is None and status == "paid" and version == PAID_VERSION)
        )
        if not final:
            verdict.unpaid.append(f"{doc} ({owner}, {status}, v{version})")
    for doc, count, low, high in _rows(conn, q.VERSION_SPANS, tenant):
        if (low, high, count) != (1, last.get(doc), high):
            verdict.gaps.append(doc)
    return last


def _quarantine_and_effects(
    conn: psycopg.Connection[Any], tenant: str, poison: set[str], verdict: Verdict
) -> None:
    held = {doc for (doc,) in conn.execute(q.QUARANTINED, (tenant,))}
    verdict.unexpected_quarantine = sorted(str(d) for d in held - poison)
    verdict.poison_not_quarantined = sorted(poison - held)
    row = conn.execute(q.UNSETTLED_EFFECTS, (tenant,)).fetchone()
    verdict.unresolved_effects = int(row[0] if row else 0)


def _charges(
    conn: psycopg.Connection[Any], tenant: str, sandbox_url: str, verdict: Verdict
) -> None:
    """The provider's own record against the ledger: one charge per paid document.

    A charge is this run's when its idempotency key is one of this tenant's intents;
    another tenant's charge (a provider is shared, document ids repeat across runs)
    is not counted, and a charge under a Handoff key that no intent has is a breach."""
    ours = {str(key): (str(doc), str(state)) for key, doc, state in _rows(conn, q.INTENTS, tenant)}
    succeeded = Counter(doc for doc, state in ours.values() if state == "succeeded")
    charged: Counter[str] = Counter()
    strangers: list[str] = []
    shape = handoff_key("pay")
    provider = SandboxPayments(sandbox_url, timeout_s=30)
    try:
        for payment in provider.every_payment(page=1000):
            key = payment["idempotencyKey"]
            if payment["status"] != "succeeded":
                continue
            if key in ours:
                charged[ours[key][0]] += 1
            elif shape.fullmatch(key):
                strangers.append(key)
    finally:
        provider.close()
    verdict.charged_without_intent += len(strangers) - _found(conn, q.KNOWN_KEYS, strangers)
    verdict.doubled += sum(n - 1 for n in charged.values() if n > 1)
    verdict.doubled += sum(n - 1 for n in succeeded.values() if n > 1)
    verdict.charged_without_intent += sum(1 for doc in charged if doc not in succeeded)


def _decoded(decoder: Decoder, value: bytes | None, where: Position) -> Event:
    """Decode, waiting out a registry that is briefly away (as a consumer does)."""
    for attempt in range(60):
        try:
            return decoder.decode(value, where)
        except Unavailable:
            if attempt == 59:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


def _topic(
    settings: HandoffSettings, topic: str, tenant: str, last: dict[str, int], verdict: Verdict,
    timeout_s: float = 180.0,
) -> None:  # fmt: skip
    """Every version of every document on the topic, first seen in order, on one partition.

    Read from the beginning to the end of every partition (the run's own topic)."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    seen: dict[str, list[int]] = {}
    partitions: dict[str, set[int]] = {}
    meta = kafka.admin(settings.kafka_bootstrap).list_topics(topic, timeout=10)
    numbers = list(meta.topics[topic].partitions)
    decoder = Decoder(settings.schema_registry_url, reader_schema(None))
    consumer = kafka.reader(settings.kafka_bootstrap, f"chaos-verdict-{uuid.uuid4().hex[:8]}",
                            eof=True)  # fmt: skip
    ended: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([TopicPartition(topic, n, OFFSET_BEGINNING) for n in numbers])
        while len(ended) < len(numbers) and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                error = msg.error()
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ended.add(partition)
                    continue
                event = _decoded(decoder, msg.value(), Position(topic, partition, offset))
                if event.tenant_id != tenant:
                    continue
                versions = seen.setdefault(event.document_id, [])
                partitions.setdefault(event.document_id, set()).add(partition)
                if event.version not in versions:  # a republished event is seen again: fine
                    versions.append(event.version)
    finally:
        consumer.close()
        decoder.close()
    if len(ended) < len(numbers):
        verdict.out_of_order.append(f"(the topic was not read to its end in {timeout_s:.0f} s)")
    for doc, high in last.items():
        if seen.get(doc) != list(range(1, high + 1)) or len(partitions.get(doc, ())) != 1:
            verdict.out_of_order.append(doc)
