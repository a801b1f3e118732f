"""A three-broker Kafka loses a partition leader (SIGKILL) while events flow.

Relays and consumer processes run against the cluster as they would in
production; the proof is from outside: every version of every document on
the topic, in order, on one partition; every consumer effect exactly once;
every process still running.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, ResourceType

from handoff.core import HandoffClient
from handoff.core.identity import Credential
from handoff.core.kafka import admin as kafka_admin
from handoff.core.kafka import ensure_topics
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from tests.fix_cluster import KafkaCluster
from tests.fix_consumer import Consumers, exactly_once, wait_effects
from tests.fix_contract import ServiceFactory, serving, signed_in
from tests.fix_relay import Relays, Workload, assert_complete_and_ordered, consume, wait_published

pytestmark = pytest.mark.slow

DOCS = 240


def _replication_of(bootstrap: str, topic: str) -> tuple[set[int], str]:
    """Replica counts of the topic's partitions, and its min.insync.replicas; nothing yet
    while the broker asked does not know the new topic (UNKNOWN_TOPIC_OR_PART)."""
    client = kafka_admin(bootstrap)
    meta = client.list_topics(topic, timeout=10).topics[topic]
    counts = {len(p.replicas) for p in meta.partitions.values()}
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        configs = client.describe_configs([resource])[resource].result(timeout=10)
    except KafkaException as exc:  # the metadata reaches every broker a moment later
        if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
        return set(), ""
    return counts, configs["min.insync.replicas"].value


def _create_paced(creator: Credential, count: int, created: list[int]) -> None:
    """Documents for the review stage, spread over seconds so a kill lands mid-stream."""
    with HandoffClient.direct(creator) as client:
        for i in range(count):
            client.create(event_id=f"c-{i}", document_id=f"paid-{i}", owner="review", status="new")
            created[0] = i + 1
            time.sleep(0.03)


def _backlog_says(cluster: KafkaCluster, tenant: str) -> str:
    """What ``handoff backlog`` says about the brokers (on stderr, with its notes)."""
    env = {**os.environ, "HANDOFF_HOME": str(cluster.home)}
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "backlog", "--window", "1", "--tenant", tenant],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return next(line for line in done.stderr.splitlines() if line.startswith("Kafka:"))


def _brokers_on_operate(api: httpx.Client) -> dict[str, Any] | None:
    answer = api.get("/v1/operate")
    assert answer.status_code == 200, answer.text[:500]
    brokers: dict[str, Any] | None = answer.json()["kafkaBrokers"]
    return brokers


def test_a_partition_leader_killed_mid_stream_loses_nothing_keeps_order_doubles_nothing(
    kafka_cluster: KafkaCluster, service: ServiceFactory, admin: psycopg.Connection[Any],
    tenant: str, effects_table: HandoffSettings, request: pytest.FixtureRequest,
    local_stack: LocalStack,
) -> None:  # fmt: skip
    topic = f"test.cluster.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_cluster.bootstrap, [topic], partitions=6)
    # A new topic reaches every broker's metadata a moment after it is created.
    replicated = ({3}, "2")
    assert wait_until(lambda: _replication_of(kafka_cluster.bootstrap, topic) == replicated, 30), (
        _replication_of(kafka_cluster.bootstrap, topic)
    )

    relays = Relays(kafka_cluster.home, topic, kafka_cluster.logs)
    consumers = Consumers(kafka_cluster.home, kafka_cluster.logs, topic)
    request.addfinalizer(relays.kill_all)
    request.addfinalizer(consumers.kill_all)
    creator, review = service("creator", can_create=True), service("review")
    workload = Workload(service, effects_table)
    request.addfinalizer(workload.close)
    for _ in range(2):
        consumers.start("review", review)
    for _ in range(2):
        relays.start(delivery_timeout_s="30", max_backoff_s="1")

    port = pick_port(18790, set())
    env = {"HANDOFF_KAFKA_BOOTSTRAP": kafka_cluster.bootstrap,
           "HANDOFF_TRACKER_LAG_INTERVAL_S": "0.5"}  # fmt: skip
    server = serving(local_stack, "cluster-api", ["serve", "--port", str(port)], port=port, **env)
    url = f"http://127.0.0.1:{port}"
    bearer = {"Authorization": f"Bearer {creator.token}"}
    with server, httpx.Client(base_url=url, timeout=15, headers=bearer) as api:
        assert wait_until(lambda: (_brokers_on_operate(api) or {}).get("up") == 3, 60)

        created = [0]
        creating = threading.Thread(target=_create_paced, args=(creator, DOCS, created))
        handing = threading.Thread(target=workload.run, args=(24, 12, 2))
        creating.start()
        handing.start()
        wait_effects(admin, tenant, 40)  # the pipeline flows end to end
        victim = kafka_cluster.leader_of(topic)
        kafka_cluster.kill(victim)
        killed_at = created[0]

        # The operate page and backlog show the broker missing ...
        assert wait_until(
            lambda: (_brokers_on_operate(api) or {}).get("missing") == [victim.node], 60, 0.5
        ), _brokers_on_operate(api)
        with signed_in(url, creator) as ui:
            page = ui.get("/operate").text
            assert f"broker {victim.node} missing since" in page, page[-3000:]
        assert f"broker {victim.node} missing" in _backlog_says(kafka_cluster, tenant)

        creating.join()
        handing.join()
        assert killed_at < DOCS, "every document was created before the kill: not mid-stream"
        # One broker down: writes still have two in-sync replicas, so nothing waits for it.
        wait_published(admin, tenant, timeout=180)
        wait_effects(admin, tenant, DOCS, timeout=180)

        # ... and then back, every partition in sync again.
        kafka_cluster.restart(victim)
        healed = {"up": 3, "missing": [], "missingSince": None, "underReplicated": 0, "offline": 0}
        assert wait_until(lambda: _brokers_on_operate(api) == healed, 120, 0.5), (
            _brokers_on_operate(api)
        )
        said = _backlog_says(kafka_cluster, tenant)
        assert said.endswith("3 brokers up, every partition fully replicated"), said

    on_cluster = effects_table.model_copy(update={"kafka_bootstrap": kafka_cluster.bootstrap})
    events = consume(on_cluster, topic, tenant, workload.complete, timeout=120)
    assert_complete_and_ordered(events, workload.versions)
    exactly_once(admin, tenant, DOCS)
    assert all(p.poll() is None for p in [*relays.procs, *consumers.procs]), "a process died"
