"""Pytest plugin: real relay processes, a topic per test, and a registry-backed consumer."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from handoff.core.client import HandoffClient
from handoff.core.outbox_sql import RELAY_LOCK_CLASS
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from tests.fix_contract import ServiceFactory


class Relays:
    """Starts ``handoff relay`` processes for one test and kills them all afterwards."""

    def __init__(self, home: Path, topic: str, logs: Path) -> None:
        self.home, self.topic, self.logs = home, topic, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, module: str = "handoff.cli", **env: str) -> subprocess.Popen[bytes]:
        """``handoff relay`` (or ``module``, e.g. tests.relay_faults) with HANDOFF_RELAY_*."""
        log = self.logs / f"relay-{self.topic}-{len(self.procs)}.log"
        environ = {
            **os.environ,
            "HANDOFF_HOME": str(self.home),
            "HANDOFF_RELAY_DEFAULT_TOPIC": self.topic,
            "HANDOFF_RELAY_REBALANCE_INTERVAL_S": "0.5",
            "HANDOFF_RELAY_POLL_INTERVAL_S": "0.5",
            **{f"HANDOFF_RELAY_{k.upper()}": v for k, v in env.items()},
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    module,
                    *(["relay"] if module == "handoff.cli" else []),
                    *args,
                ],
                env=environ,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def run_once(self, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[bytes]:
        proc = self.start("--once", **env)
        proc.wait(timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def relays(local_stack: LocalStack, migrated: HandoffSettings) -> Iterator[Relays]:
    topic = f"test.relay.{uuid.uuid4().hex[:8]}"
    group = Relays(local_stack.layout.home, topic, local_stack.layout.logs)
    try:
        yield group
    finally:
        group.kill_all()


def pending(admin: psycopg.Connection[Any], tenant: str) -> int:
    """The tenant's outbox rows not published: pending and parked."""
    row = admin.execute(
        "SELECT (SELECT count(*) FROM handoff.outbox_pending WHERE tenant_id = %(t)s)"
        " + (SELECT count(*) FROM handoff.outbox"
        "     WHERE tenant_id = %(t)s AND parked_at IS NOT NULL)",
        {"t": tenant},
    ).fetchone()
    return int(row[0]) if row else 0


# The relays' slot locks (handoff/relay/slots.py): one per owned slot, on the session
# of the relay that owns it.
SLOT_LOCKS = f"""
SELECT count(*), count(DISTINCT pid) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = {RELAY_LOCK_CLASS} AND granted
"""


def slots_held(admin: psycopg.Connection[Any]) -> int:
    """The slots some relay owns (all 256 once the relays have settled)."""
    return _slot_locks(admin)[0]


def slot_holders(admin: psycopg.Connection[Any]) -> int:
    """The running relays: each holds its slots' advisory locks on its session."""
    return _slot_locks(admin)[1]


def _slot_locks(admin: psycopg.Connection[Any]) -> tuple[int, int]:
    row = admin.execute(SLOT_LOCKS).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def wait_published(admin: psycopg.Connection[Any], tenant: str, timeout: float = 120) -> None:
    assert wait_until(lambda: pending(admin, tenant) == 0, timeout, 0.25), (
        f"{pending(admin, tenant)} outbox rows of {tenant} still unpublished"
    )


Events = dict[str, list[dict[str, Any]]]


def consume(
    settings: HandoffSettings,
    topic: str,
    tenant: str,
    enough: Callable[[Events], bool],
    timeout: float = 60,
) -> Events:
    """Events of one tenant from the start of ``topic``, per document in partition order."""
    by_doc: Events = defaultdict(list)
    with SchemaRegistryClient({"url": settings.schema_registry_url, "timeout": 10}) as registry:
        # Topic-name strategy, as the relay registers: the client's default
        # (associations lookup) is an API Apicurio may never answer.
        decode = AvroDeserializer(
            registry, conf={"subject.name.strategy": topic_subject_name_strategy}
        )
        consumer = Consumer(
            {
                "bootstrap.servers": settings.kafka_bootstrap,
                "group.id": f"test-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not enough(by_doc):
                for msg in consumer.consume(500, 0.5):
                    if msg.error():
                        continue
                    headers = dict(msg.headers() or [])
                    if headers.get("tenant") != tenant.encode():
                        continue
                    event = decode(msg.value(), SerializationContext(topic, MessageField.VALUE))
                    assert event is not None
                    event["_headers"] = headers
                    event["_key"] = msg.key()
                    event["_value"] = msg.value()
                    event["_partition"] = msg.partition()
                    by_doc[event["documentId"]].append(event)
        finally:
            consumer.close()
    return by_doc


def first_seen_versions(events: list[dict[str, Any]]) -> list[int]:
    """Versions in the order they first appear (republished duplicates dropped)."""
    seen: set[str] = set()
    order = []
    for event in events:
        if event["eventId"] not in seen:
            seen.add(event["eventId"])
            order.append(event["version"])
    return order


OWNERS = ("alpha", "beta")


class Workload:
    """Documents handed back and forth between two services, from several threads."""

    def __init__(self, service: ServiceFactory, settings: HandoffSettings) -> None:
        creds = {name: service(name, can_create=True) for name in OWNERS}
        self.clients = {n: HandoffClient.direct(c, settings.database_url) for n, c in creds.items()}
        self.versions: dict[str, int] = {}

    def run(self, docs: int, steps: int, threads: int = 4, prefix: str = "doc") -> None:
        names = [f"{prefix}-{i}" for i in range(docs)]

        def work(mine: list[str]) -> None:
            for doc in mine:
                self.clients["alpha"].create(
                    event_id=str(uuid.uuid4()), document_id=doc, owner="alpha", status="new"
                )
            for step in range(1, steps):
                for doc in mine:
                    sender = OWNERS[(step - 1) % 2]
                    nxt = OWNERS[step % 2]
                    self.clients[sender].emit(
                        event_id=str(uuid.uuid4()),
                        event_type="approved" if step % 5 == 0 else "handed",
                        document_id=doc,
                        next_owner=nxt,
                        status=f"step-{step}",
                        expected_version=step,
                        data={"step": step},
                    )
            for doc in mine:
                self.versions[doc] = steps

        workers = [threading.Thread(target=work, args=(names[i::threads],)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    def complete(self, events: Events) -> bool:
        return all(
            set(first_seen_versions(events.get(doc, []))) >= set(range(1, v + 1))
            for doc, v in self.versions.items()
        )

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def assert_complete_and_ordered(events: Events, versions: dict[str, int]) -> None:
    for doc, last in versions.items():
        assert first_seen_versions(events[doc]) == list(range(1, last + 1)), doc
        # one document, one key, one partition
        assert len({e["_partition"] for e in events[doc]}) == 1
        assert len({e["_key"] for e in events[doc]}) == 1


@pytest.fixture
def workload(service: ServiceFactory, migrated: HandoffSettings) -> Iterator[Workload]:
    load = Workload(service, migrated)
    yield load
    load.close()
