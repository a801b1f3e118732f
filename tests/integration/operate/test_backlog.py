"""``handoff backlog`` on the real stack: a consumer group's backlog and oldest pending age
from Kafka, the relay's from the outbox, the drain time; and the capacity experiment
running real consumer processes at 1 and 2 workers against a real backlog."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition

from handoff.core import HandoffClient
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from tests.fix_consumer import Wire, effects, payloads
from tests.fix_contract import ServiceFactory


def _backlog(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", "backlog", *args],
        capture_output=True, text=True, timeout=240, check=False, env={**os.environ, **env},
    )  # fmt: skip


@pytest.fixture
def waiting(
    service: ServiceFactory, migrated: HandoffSettings, wire: Wire, admin: psycopg.Connection[Any],
    tenant: str,
) -> Credential:  # fmt: skip
    """60 events for review on the wire topic; review's group has taken none of them."""
    maker, review = service("maker", can_create=True), service("review")
    with HandoffClient.direct(maker, migrated.database_url, pool_size=1) as client:
        for i in range(60):
            client.create(event_id=f"d{i}-c", document_id=f"d{i}", owner="review", status="new")
    for (doc, _r, _v), payload in sorted(payloads(admin, tenant).items()):
        wire.produce(wire.encode(payload), key=doc, event_type="created", owner="review",
                     tenant=tenant)  # fmt: skip
    group = Consumer({"bootstrap.servers": migrated.kafka_bootstrap,
                      "group.id": f"handoff.{tenant}.review"})  # fmt: skip
    try:  # a committed position at the start of every partition: all 60 are its backlog
        group.commit(offsets=[TopicPartition(wire.topic, p, 0) for p in range(3)],
                     asynchronous=False)  # fmt: skip
    finally:
        group.close()
    return review


def test_the_budget_shows_backlog_age_and_no_finite_drain_time(
    waiting: Credential, tenant: str
) -> None:
    done = _backlog("--tenant", tenant, "--window", "1")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if f"review ({tenant})" in line)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    assert cells[1] == "60"  # backlog
    assert float(cells[5].replace(",", "")) >= 0  # oldest pending age, seconds
    assert cells[6] == "no finite drain time"  # nothing completes: it would never drain
    assert any(line.strip().startswith("│ relay") for line in done.stdout.splitlines())


def test_the_experiment_measures_capacity_per_worker_count(
    waiting: Credential, wire: Wire, admin: psycopg.Connection[Any], tenant: str
) -> None:
    env = {
        "HANDOFF_CONSUMER_CREDENTIAL": waiting.token,
        "HANDOFF_CONSUMER_TOPICS": json.dumps([wire.topic]),
        "TEST_CONSUMER_NAME": "review",
        "TEST_CONSUMER_SLEEP_S": "0.05",  # at most ~20 events/s per worker
        "HANDOFF_CONSUMER_BATCH_SIZE": "1",
    }
    done = _backlog("--experiment", "--app", "tests.consumer_apps:app", "--levels", "1,2",
                    "--step-seconds", "2", **env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if re.match(r"│\s+\d+\s+│", line)]
    assert rows, done.stdout
    first = [c.strip() for c in rows[0].split("│") if c.strip()]
    assert first[0] == "1" and float(first[1]) > 0
    applied = len(effects(admin, tenant))
    assert 0 < applied <= 60 and len({r[4] for r in effects(admin, tenant)}) == applied
