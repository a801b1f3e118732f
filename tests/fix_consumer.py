"""Pytest plugin: real ``handoff consume`` processes, their effects, and in-process consumers.

Processes run ``tests.consumer_apps:app`` (see there for its knobs). The
in-process helpers build the same ``Processor`` the runtime uses, on a
connection logged in as the service, fed with real wire-format events
(encoded with the registry's schema id, decoded through the registry).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import Producer
from psycopg.conninfo import make_conninfo

from handoff.consumers import Event
from handoff.consumers.app import Consumer
from handoff.consumers.decoding import Decoder, reader_schema
from handoff.consumers.event import Position
from handoff.consumers.queued import QueuedLane
from handoff.consumers.settings import ConsumerSettings
from handoff.consumers.units import Item, Processor
from handoff.core import HandoffClient, HandoffTx
from handoff.core.events import encode, to_record
from handoff.core.identity import Credential
from handoff.core.kafka import ensure_topics
from handoff.core.micros import to_micros
from handoff.core.settings import HandoffSettings
from handoff.relay.kafka_io import headers, register_schemas
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from tests.consumer_apps import EFFECTS_DDL
from tests.fix_citus import ON_CITUS

ROOT = Path(__file__).resolve().parents[1]

Payloads = dict[tuple[str, int, int], Any]  # outbox payloads by (document, run, version)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that restart a part of the shared stack run last.

    A PostgreSQL restart ends the sessions that other tests' long-lived
    servers keep in their pools (the API answers those requests 503, as it
    should); run last, it cannot trouble a test that does not expect it.
    """
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


@pytest.fixture(scope="session")
def effects_table(migrated: HandoffSettings) -> HandoffSettings:
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        conn.execute(EFFECTS_DDL)
        if ON_CITUS:  # a unit's writes run on its tenant's worker: the tables go there too
            for table in ("consumer_test.effects", "consumer_test.cures"):
                conn.execute(
                    "SELECT create_distributed_table(%(t)s, 'tenant_id') WHERE NOT EXISTS"
                    " (SELECT FROM pg_dist_partition WHERE logicalrelid = %(t)s::regclass)",
                    {"t": table},
                )
                # Co-located with the tenant's shards, which chaos moves and rebalance
                # moves online: logical replication needs a replica identity.
                conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    return migrated


class Consumers:
    """``handoff consume tests.consumer_apps:app`` processes for one test; killed afterwards."""

    def __init__(self, home: Path, logs: Path, topic: str) -> None:
        self.home, self.logs, self.topic = home, logs, topic
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: dict[int, int] = {}

    def start(
        self, name: str, credential: Credential, *args: str, **env: str
    ) -> subprocess.Popen[bytes]:
        port = pick_port(18600 + len(self.procs), set(self.ports.values()))
        log = self.logs / f"consumer-{self.topic}-{len(self.procs)}.log"
        environ = {
            **os.environ,
            "HANDOFF_HOME": str(self.home),
            "HANDOFF_CONSUMER_CREDENTIAL": credential.token,
            "HANDOFF_CONSUMER_SWEEP_INTERVAL_S": "0.3",
            "HANDOFF_CONSUMER_METRICS_INTERVAL_S": "0.5",
            "HANDOFF_CONSUMER_RETRY_BASE_S": "0.05",
            # A killed process's partitions move on after 6 s, not 45.
            "HANDOFF_CONSUMER_SESSION_TIMEOUT_S": "6",
            "TEST_CONSUMER_NAME": name,
            **env,
        }
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "handoff.cli",
                    "consume",
                    "tests.consumer_apps:app",
                    "--topic",
                    self.topic,
                    "--metrics-port",
                    str(port),
                    *args,
                ],
                env=environ,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        self.ports[proc.pid] = port
        return proc

    def metric(self, proc: subprocess.Popen[bytes], name: str, **labels: str) -> float:
        """One sample of the process's /metrics (0 when absent)."""
        text = httpx.get(f"http://127.0.0.1:{self.ports[proc.pid]}/metrics", timeout=5).text
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            if all(f'{k}="{v}"' in head for k, v in labels.items()) or not wanted:
                total += float(value)
        return total

    def log_of(self, index: int = -1) -> str:
        logs = sorted(self.logs.glob(f"consumer-{self.topic}-*.log"))
        return logs[index].read_text() if logs else ""

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def consumers(
    local_stack: LocalStack, effects_table: HandoffSettings, relays: Any
) -> Iterator[Consumers]:
    """Consumer processes reading the topic of this test's relays."""
    group = Consumers(local_stack.layout.home, local_stack.layout.logs, relays.topic)
    try:
        yield group
    finally:
        group.kill_all()


def effects(admin: psycopg.Connection[Any], tenant: str) -> list[tuple[Any, ...]]:
    """(consumer, document, run, version, event id) of every effect, in commit order."""
    return admin.execute(
        "SELECT consumer, document_id, run_id, version, event_id FROM consumer_test.effects"
        " WHERE tenant_id = %s ORDER BY done_at, document_id",
        (tenant,),
    ).fetchall()


def wait_effects(
    admin: psycopg.Connection[Any], tenant: str, count: int, timeout: float = 90
) -> None:
    assert wait_until(lambda: len(effects(admin, tenant)) >= count, timeout, 0.2), (
        f"{len(effects(admin, tenant))} of {count} effects after {timeout} s"
    )


def exactly_once(admin: psycopg.Connection[Any], tenant: str, count: int) -> None:
    """Every one of ``count`` events has exactly one effect: none lost, none doubled."""
    per_event = Counter(event_id for *_, event_id in effects(admin, tenant))
    doubled = {e: n for e, n in per_event.items() if n > 1}
    assert not doubled, f"double effects: {doubled}"
    assert len(per_event) == count


def quarantined(admin: psycopg.Connection[Any], tenant: str) -> list[dict[str, Any]]:
    with admin.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(
            "SELECT * FROM handoff.quarantine WHERE tenant_id = %s ORDER BY id", (tenant,)
        ).fetchall()


class Wire:
    """Real wire-format events for a topic: registry ids, outbox payloads, a producer."""

    def __init__(self, settings: HandoffSettings, topic: str) -> None:
        self.settings, self.topic = settings, topic
        ensure_topics(settings.kafka_bootstrap, [topic], 3)
        self.schema, ids = register_schemas(settings.schema_registry_url, [topic])
        self.schema_id = ids[topic]
        self._producer: Producer | None = None

    def encode(self, payload: dict[str, Any]) -> bytes:
        return encode(self.schema, self.schema_id, to_record(dict(payload), self.schema.version))

    def produce(
        self, value: bytes, *, key: str, event_type: str, owner: str | None, tenant: str
    ) -> None:
        if self._producer is None:
            self._producer = Producer({"bootstrap.servers": self.settings.kafka_bootstrap})
        # The relay's headers, for a message made by hand (its event id is the key's).
        made = {"eventId": key, "eventType": event_type, "owner": owner, "tenantId": tenant,
                "version": 1, "source": "tests", "documentId": key,
                "occurredAt": to_micros(datetime.now(UTC))}  # fmt: skip
        self._producer.produce(self.topic, value, key.encode(), headers=headers(made))
        assert self._producer.flush(30) == 0


def payloads(admin: psycopg.Connection[Any], tenant: str) -> dict[tuple[str, int, int], Any]:
    """The outbox payload of every accepted change of a tenant, by (document, run, version)."""
    rows = admin.execute(
        "SELECT document_id, run_id, version, payload FROM handoff.outbox WHERE tenant_id = %s",
        (tenant,),
    ).fetchall()
    return {(d, r, v): p for d, r, v, p in rows}


class InProcess:
    """The runtime's Processor on a service connection, fed with items by the test."""

    def __init__(self, settings: HandoffSettings, app: Consumer, wire: Wire, **config: Any) -> None:
        cred = app.credential
        info = make_conninfo(settings.database_url, user=cred.role, password=cred.secret)
        self.conn = psycopg.connect(info, autocommit=True)  # as the runtime's
        self.reads = psycopg.connect(info, autocommit=True)
        self.config = ConsumerSettings(**{"retry_base_s": 0.0, **config})
        # As the runtime does: the consumer's tenant, named by every call of a unit.
        [(tenant, _)] = self.reads.execute("SELECT * FROM handoff.consumer_whoami()").fetchall()
        self.processor = Processor(app, self.conn, self.config, sleep=lambda _: None,
                                   tenant=tenant)  # fmt: skip
        self.decoder = Decoder(settings.schema_registry_url, reader_schema(None))
        self.wire = wire
        self.offset = 0

    def item(self, payload: dict[str, Any], headers: dict[str, str] | None = None) -> Item:
        """``payload`` as the next message, with the Kafka ``headers`` given (a trace's)."""
        self.offset += 1
        value = self.wire.encode(payload)
        position = Position(self.wire.topic, 0, self.offset, None, value, headers or {})
        return Item(position, event=self.decoder.decode(value, position))

    def deliver(self, *payload_list: dict[str, Any]) -> None:
        self.processor.run_batch([self.item(p) for p in payload_list])

    def queue(
        self, *entries: dict[str, Any] | list[dict[str, Any]] | None, ahead: int = 1
    ) -> list[int]:
        """``entries`` through the lane that sends units ahead (consumers/queued.py): an
        event, a list (a batch, one unit) or None (a message with nothing to run);
        answers their indexes in the order done."""
        done: list[int] = []
        units = [(n, [] if p is None else [self.item(e) for e in (p if isinstance(p, list)
                                                                   else [p])])
                 for n, p in enumerate(entries)]  # fmt: skip
        QueuedLane[int](self.processor, ahead).run(units, done.append)
        return done

    def sweep(self) -> int:
        from handoff.consumers.units import sweep

        return sweep(self.processor, self.reads, self.decoder)

    def close(self) -> None:
        self.decoder.close()
        self.conn.close()
        self.reads.close()


@pytest.fixture
def wire(effects_table: HandoffSettings) -> Wire:
    return Wire(effects_table, f"test.consumer.{uuid.uuid4().hex[:8]}")


# -- in-process consumers over real handoffs (ordering, queued units) ----------------


# The in-process consumer "audit"'s effect row.
EFFECT = (
    "INSERT INTO consumer_test.effects (tenant_id, consumer, event_id, document_id, run_id,"
    " version, note, occurred_at) VALUES (%s, 'audit', %s, %s, %s, %s, %s, %s)"
)


def effect_row(event: Event, event_id: str | None = None) -> tuple[Any, ...]:
    """EFFECT's values for ``event`` (``event_id`` None: the event's own id)."""
    return (event.tenant_id, event.event_id if event_id is None else event_id,
            event.document_id, event.run_id, event.version, event.data.get("note"),
            event.occurred_at)  # fmt: skip


def record(event: Event, tx: HandoffTx) -> None:
    """The effect written at once (a statement whose result could be read)."""
    tx.execute(EFFECT, effect_row(event))


def noted(event: Event, tx: HandoffTx) -> None:
    """The effect as a write the unit never reads: its unit can be sent ahead."""
    tx.write(EFFECT, effect_row(event))


def noted_badly(event: Event, tx: HandoffTx) -> None:
    """An effect row without its event id: the write fails (NOT NULL) when the unit runs,
    not before."""
    tx.write(EFFECT, (event.tenant_id, None, *effect_row(event)[2:]))


def noted_unless_bad(event: Event, tx: HandoffTx) -> None:
    """``noted``, but ``noted_badly`` for the document "bad": its unit fails in the
    database, the others apply."""
    (noted_badly if event.document_id == "bad" else noted)(event, tx)


@pytest.fixture
def story(
    service: Callable[..., Credential], tenant: str, admin: psycopg.Connection[Any]
) -> Callable[[int], Payloads]:
    """Document ``d`` created for worker, then progressed by worker to version ``n``."""
    creator = service("creator", can_create=True)
    worker = service("worker")

    def make(versions: int, doc: str = "d") -> Payloads:
        with HandoffClient.direct(creator) as c:
            c.create(event_id=f"{doc}-1", document_id=doc, owner="worker", status="new")
        with HandoffClient.direct(worker) as w:
            for v in range(2, versions + 1):
                w.emit(
                    event_id=f"{doc}-{v}",
                    event_type="routed",
                    document_id=doc,
                    next_owner="worker",
                    status=f"step {v}",
                    expected_version=v - 1,
                )
        return payloads(admin, tenant)

    return make


@pytest.fixture
def audit(
    service: Callable[..., Credential], effects_table: HandoffSettings, wire: Wire
) -> Iterator[Callable[..., InProcess]]:
    """An in-process consumer "audit" of every owner's created/routed/run-started events."""
    opened: list[InProcess] = []
    cred = service("audit")

    def make(handler: Callable[[Event, HandoffTx], None] = record, **config: Any) -> InProcess:
        app = Consumer("audit", cred, owner=None)
        for event_type in ("created", "routed", "run-started"):
            app.add_handler(event_type, handler)
        consumer = InProcess(effects_table, app, wire, **config)
        opened.append(consumer)
        return consumer

    yield make
    for consumer in opened:
        consumer.close()
