"""The PostgreSQL primary of a Patroni cluster is lost (SIGKILL) while work flows.

Two relays and two consumer stages run as processes against the cluster's
multi-host URL; a load generator creates documents and, when the outcome of
a create is unknown, retries it with the same event id. Patroni promotes
the synchronous standby; the old primary is started again and rejoins as a
standby. The proof is from outside: every receipt the generator was given is
in the new primary, every outbox row reached the topic in order per
document (no row skipped by the relay's floor across the promotion), every
consumer effect happened exactly once, and no process died.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest

from handoff.core import HandoffClient
from handoff.core.errors import OutcomeUnknown, TransientConflict, Unavailable
from handoff.core.identity import Credential
from handoff.core.kafka import ensure_topics
from handoff.core.models import Receipt
from handoff.core.services import add_service
from handoff.stack.procs import wait_until
from tests.fix_cluster import PostgresCluster
from tests.fix_consumer import Consumers, effects, exactly_once
from tests.fix_relay import Relays, assert_complete_and_ordered, consume, pending

pytestmark = pytest.mark.slow

MIN_DOCS = 120
MAX_DOCS = 5000  # a bound on a run that never sees its stop (about 25 creates a second)


class PacedCreator:
    """Creates documents one by one until told to stop; an unknown outcome is retried
    with the same event id.

    It runs until the test has seen the failover through, however long the pipeline
    takes to flow before the crash (a fixed count ran out before the crash on a slow
    CI machine): so creates are always in flight when the primary dies.
    """

    def __init__(self, credential: Credential, database_url: str) -> None:
        self.client = HandoffClient.direct(credential, database_url, pool_size=1)
        self.receipts: dict[str, Receipt] = {}
        self.retried = 0  # attempts that failed and were sent again
        self.longest_outage_s = 0.0
        self.replayed = 0  # retries answered with the first attempt's stored receipt
        self.stop = threading.Event()

    def run(self) -> None:
        for i in range(MAX_DOCS):
            if self.stop.is_set() and i >= MIN_DOCS:
                return
            event_id = f"create-{i}-{uuid.uuid4().hex[:6]}"
            failing_since: float | None = None
            while True:
                try:
                    receipt = self.client.create(
                        event_id=event_id, document_id=f"doc-{i}", owner="review", status="new"
                    )
                except (Unavailable, OutcomeUnknown, TransientConflict):
                    failing_since = failing_since or time.monotonic()
                    self.retried += 1
                    time.sleep(0.2)
                    continue
                break
            if failing_since is not None:
                self.longest_outage_s = max(self.longest_outage_s, time.monotonic() - failing_since)
            self.replayed += receipt.replayed
            self.receipts[receipt.document_id] = receipt
            time.sleep(0.04)

    def close(self) -> None:
        self.client.close()


def _registry_writes(url: str) -> bool:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    record = {"type": "record", "name": f"R{uuid.uuid4().hex[:8]}", "fields": []}
    try:
        with SchemaRegistryClient({"url": url, "timeout": 10}) as registry:
            registry.register_schema(f"failover-{uuid.uuid4().hex[:8]}",
                                     Schema(json.dumps(record), "AVRO"))  # fmt: skip
    except Exception:  # the client raises several types while its storage is away
        return False
    return True


def _registry_reads(url: str) -> bool:
    """A fresh client (nothing cached) reads the first schema the relays registered."""
    try:
        answer = httpx.get(f"{url}/schemas/ids/1", timeout=5)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200 and "schema" in answer.json()


def _on_primary(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """One query on whichever node is primary now (a fresh session: the last one may be gone)."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(query, args).fetchall()


def test_the_primary_lost_mid_stream_loses_no_acknowledged_write_and_doubles_nothing(
    pg_cluster: PostgresCluster, request: pytest.FixtureRequest
) -> None:
    settings = pg_cluster.settings
    url = settings.database_url
    topic = f"test.failover.{uuid.uuid4().hex[:8]}"
    ensure_topics(settings.kafka_bootstrap, [topic], partitions=6)
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        creator = add_service(admin, "creator", tenant=tenant, can_create=True)
        review = add_service(admin, "review", tenant=tenant)
        settle = add_service(admin, "settle", tenant=tenant)

    relays = Relays(pg_cluster.home, topic, pg_cluster.logs)
    consumers = Consumers(pg_cluster.home, pg_cluster.logs, topic)
    request.addfinalizer(relays.kill_all)
    request.addfinalizer(consumers.kill_all)
    for _ in range(2):
        consumers.start("review", review, TEST_CONSUMER_NEXT="settle")
        consumers.start("settle", settle)
        relays.start(delivery_timeout_s="30", max_backoff_s="1")

    timeline = pg_cluster.timeline()
    generator = PacedCreator(creator, url)
    request.addfinalizer(generator.close)
    creating = threading.Thread(target=generator.run)
    creating.start()

    def effects_now() -> int:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                return len(effects(conn, tenant))
        except psycopg.OperationalError:
            return -1

    assert wait_until(lambda: effects_now() >= 30, 90, 0.3), "the pipeline did not flow"
    lost = pg_cluster.crash_primary()
    created_at_crash = len(generator.receipts)
    # The registry stores in the cluster too: a schema it never served to this client
    # is read from the new primary at once (its pool drops connections to the dead one).
    assert wait_until(lambda: _registry_reads(settings.schema_registry_url), 10, 0.5), (
        "the schema registry served no schema after the failover"
    )
    # Strict synchronous mode: the new primary takes no commit until a standby
    # has it too, so the lost node is brought back (it rejoins with pg_rewind).
    pg_cluster.rejoin(lost)
    assert pg_cluster.timeline() > timeline, "no promotion happened"
    # ... and takes a new schema once the new primary commits.
    assert wait_until(lambda: _registry_writes(settings.schema_registry_url), 30, 1.0), (
        "the schema registry took no new schema after the failover"
    )

    generator.stop.set()
    creating.join(300)
    assert not creating.is_alive(), "the load generator did not finish"
    docs = len(generator.receipts)
    assert created_at_crash < docs, "every document was created before the crash"
    assert generator.retried > 0, "no create met the failover: the test proved nothing"

    # 0 lost: every receipt given out is on the new primary, at its version.
    stored = dict(
        _on_primary(
            url,
            "SELECT event_id, version FROM handoff.document_history WHERE tenant_id = %s",
            tenant,
        )
    )
    missing = [r.event_id for r in generator.receipts.values() if r.event_id not in stored]
    assert not missing, f"{len(missing)} acknowledged creates lost, e.g. {missing[:3]}"
    assert docs < MAX_DOCS, "the load generator ran to its bound: it never saw its stop"

    # Everything drains on the new primary: published, applied once per stage.
    with psycopg.connect(url, autocommit=True) as admin:
        assert wait_until(lambda: pending(admin, tenant) == 0, 180, 0.5), pending(admin, tenant)
        assert wait_until(lambda: len(effects(admin, tenant)) >= 2 * docs, 180, 0.5), (
            f"{len(effects(admin, tenant))} of {2 * docs} effects"
        )
        exactly_once(admin, tenant, 2 * docs)

    # No outbox row skipped across the promotion: both versions of every document
    # reached the topic, in order, on one partition.
    versions = {doc: 2 for doc in generator.receipts}

    def complete(events: dict[str, list[dict[str, Any]]]) -> bool:
        return all(len({e["version"] for e in events.get(d, [])}) == 2 for d in versions)

    events = consume(settings, topic, tenant, complete, timeout=120)
    assert_complete_and_ordered(events, versions)
    assert all(p.poll() is None for p in [*relays.procs, *consumers.procs]), "a process died"
    print(
        f"failover: timeline {timeline} -> {pg_cluster.timeline()}, creates retried "
        f"{generator.retried} times, {generator.replayed} answered with the stored receipt, "
        f"longest wait for a create {generator.longest_outage_s:.1f} s"
    )
