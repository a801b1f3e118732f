"""Consumer processes on the real stack: relay -> Kafka -> ``handoff consume`` -> PostgreSQL.

Crashes are real (kill -9), redeliveries are real (offsets not committed),
and the proof is always the same: every event's effect exactly once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from handoff.core import HandoffClient
from handoff.core.identity import Credential
from handoff.core.kafka import UNREACHABLE
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from tests.fix_consumer import (
    Consumers,
    Wire,
    effects,
    exactly_once,
    quarantined,
    wait_effects,
)
from tests.fix_relay import Relays

pytestmark = pytest.mark.slow


def _create(creator: Credential, count: int, owner: str = "review", **data: Any) -> None:
    with HandoffClient.direct(creator) as client:
        for i in range(count):
            client.create(
                event_id=f"c-{i}", document_id=f"doc-{i}", owner=owner, status="new", data=data
            )


def test_one_event_given_to_two_consumer_processes_at_once_has_one_effect(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
) -> None:
    creator = service("creator", can_create=True)
    review = service("review")
    service("finalization")
    # Two groups: Kafka hands every event to both processes, as after a
    # rebalance that moved a partition while its batch was in flight.
    first = consumers.start(
        "review", review, "--group", f"{tenant}-a", TEST_CONSUMER_NEXT="finalization"
    )
    second = consumers.start(
        "review", review, "--group", f"{tenant}-b", TEST_CONSUMER_NEXT="finalization"
    )
    relays.start()
    _create(creator, 200)
    wait_effects(admin, tenant, 200)
    assert wait_until(
        lambda: (
            sum(
                consumers.metric(p, "handoff_consumer_events_total", outcome="duplicate")
                for p in (first, second)
            )
            >= 200
        ),
        60,
        0.3,
    ), "both processes should have seen every event"
    exactly_once(admin, tenant, 200)
    owners = admin.execute(
        "SELECT owner, count(*) FROM handoff.document_state WHERE tenant_id = %s GROUP BY owner",
        (tenant,),
    ).fetchall()
    assert owners == [("finalization", 200)]  # each next handoff made once, by one of them
    applied = sum(
        consumers.metric(p, "handoff_consumer_events_total", outcome="applied")
        for p in (first, second)
    )
    assert applied == 200


@pytest.mark.parametrize(
    "deferred",
    # The effect run at once (each batch verdict first); and as a deferred write, so that
    # batches are sent ahead (consumers/queued.py): killed with batches queued.
    ["", "1"],
)
def test_kill_9_mid_batch_then_restart_loses_nothing_and_doubles_nothing(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
    deferred: str,
) -> None:
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 300)
    relays.run_once()
    _killed_midway_then_restarted(consumers, review, admin, tenant, 300, "--batch-size", "50",
                                  TEST_CONSUMER_DEFERRED=deferred)  # fmt: skip


def test_kill_9_with_units_sent_ahead_at_batch_1_loses_nothing_and_doubles_nothing(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
) -> None:
    """Batch 1 in one lane sends each unit while the one before it runs (consumers/queued.py):
    killed with units queued and their offsets not stored, restarted, each event once."""
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 300)
    relays.run_once()
    again = _killed_midway_then_restarted(
        consumers, review, admin, tenant, 300, "--batch-size", "1", TEST_CONSUMER_DEFERRED="1"
    )
    assert "not sent ahead" not in consumers.log_of(), "its units should have gone ahead"
    assert again.poll() is None


def _suppresses_duplicates(consumers: Consumers, proc: subprocess.Popen[bytes]) -> bool:
    """Within 30 s the process's metrics count a redelivered event suppressed by the guard."""
    return wait_until(
        lambda: consumers.metric(proc, "handoff_consumer_events_total", outcome="duplicate") > 0,
        30,
        0.3,
    )


def _killed_midway_then_restarted(
    consumers: Consumers,
    review: Credential,
    admin: psycopg.Connection[Any],
    tenant: str,
    total: int,
    *args: str,
    **env: str,
) -> subprocess.Popen[bytes]:
    """A slow consumer killed (-9) after a fifth of ``total``, and its restart: all once."""
    slow = consumers.start("review", review, *args, TEST_CONSUMER_SLEEP_S="0.01", **env)
    wait_effects(admin, tenant, total // 5)
    slow.send_signal(signal.SIGKILL)  # mid-unit: a unit is open, offsets lag behind
    slow.wait(10)
    done = len(effects(admin, tenant))
    assert 0 < done < total, done
    again = consumers.start("review", review, *args, **env)
    wait_effects(admin, tenant, total)
    exactly_once(admin, tenant, total)
    return again


def test_kill_9_between_the_database_commit_and_the_offset_commit_is_absorbed_by_the_guard(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
) -> None:
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 120)
    relays.run_once()
    doomed = consumers.start(
        "review", review, "--batch-size", "40", TEST_CONSUMER_KILL_AFTER_COMMIT="1"
    )
    assert doomed.wait(60) == -signal.SIGKILL
    committed = len(effects(admin, tenant))
    assert committed > 0  # its database commit landed; its offsets did not
    again = consumers.start("review", review, "--batch-size", "40")
    wait_effects(admin, tenant, 120)
    exactly_once(admin, tenant, 120)
    assert _suppresses_duplicates(consumers, again), "the redelivered batch should be suppressed"


@pytest.mark.parametrize(
    "deferred",
    # The effect run at once; and as a deferred write: each lane sends its units ahead.
    ["", "1"],
)
def test_lanes_keep_each_documents_order_and_survive_kill_9(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
    deferred: str,
) -> None:
    """Batch 1 over three lanes: documents overlap, each one's versions stay in order."""
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 40)
    with HandoffClient.direct(review) as client:  # versions 2 and 3 of each, still review's
        for version in (1, 2):
            for i in range(40):
                client.emit(event_id=f"r-{i}-{version}", event_type="routed",
                            document_id=f"doc-{i}", next_owner="review", status="routed",
                            expected_version=version)  # fmt: skip
    relays.run_once()
    # Killed with lanes mid-unit and the poll's offsets not stored.
    again = _killed_midway_then_restarted(
        consumers,
        review,
        admin,
        tenant,
        120,
        "--batch-size",
        "1",
        "--concurrency",
        "3",
        TEST_CONSUMER_DEFERRED=deferred,
    )
    versions: dict[str, list[int]] = {}
    for _, document, _, version, _ in effects(admin, tenant):  # in commit order
        versions.setdefault(document, []).append(version)
    assert all(v == [1, 2, 3] for v in versions.values()), versions
    pids = admin.execute(
        "SELECT count(DISTINCT pid) FROM consumer_test.effects WHERE tenant_id = %s", (tenant,)
    ).fetchone()
    assert pids is not None and pids[0] >= 3, "each lane commits on a connection of its own"
    assert _suppresses_duplicates(consumers, again), "what the killed one committed comes again"


def _cli(*args: str, home: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", *args],
        env={**os.environ, "HANDOFF_HOME": home},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def test_poison_is_quarantined_its_document_waits_others_flow_and_a_cli_retry_applies_once(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
) -> None:
    creator, worker, audit = (
        service("creator", can_create=True),
        service("worker"),
        service("audit"),
    )
    with HandoffClient.direct(creator) as c:
        c.create(
            event_id="bad-1", document_id="bad", owner="worker", status="new", data={"poison": True}
        )
    _create(creator, 5, owner="worker")
    with HandoffClient.direct(worker) as w:
        for v in (2, 3):
            w.emit(
                event_id=f"bad-{v}",
                event_type="routed",
                document_id="bad",
                next_owner="worker",
                status=f"step {v}",
                expected_version=v - 1,
            )
    relays.start()
    proc = consumers.start("audit", audit, TEST_CONSUMER_OWNER="*", TEST_CONSUMER_VERSION="7")
    wait_effects(admin, tenant, 5)  # the other documents flow
    assert wait_until(lambda: len(quarantined(admin, tenant)) == 1, 60, 0.3)
    [entry] = quarantined(admin, tenant)
    assert (entry["category"], entry["attempts"], entry["handler_version"]) == (
        "handler_error",
        3,
        "7",
    )
    assert wait_until(
        lambda: (
            admin.execute(
                "SELECT count(*) FROM handoff.consumer_parked WHERE tenant_id = %s", (tenant,)
            ).fetchone()
            == (2,)
        ),
        30,
        0.3,
    ), "bad v2 and v3 should wait parked behind the quarantined v1"
    assert all(d != "bad" for _, d, *_ in effects(admin, tenant))

    home = str(consumers.home)
    listed = _cli("quarantine", "list", "--tenant", tenant, home=home)
    assert listed.returncode == 0 and "handler_error" in listed.stderr + listed.stdout
    shown = _cli("quarantine", "show", str(entry["id"]), home=home)
    assert shown.returncode == 0 and "poison" in shown.stdout and "quarantined" in shown.stdout
    unconfirmed = _cli("quarantine", "retry", str(entry["id"]), "--reason", "x", home=home)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr

    admin.execute("INSERT INTO consumer_test.cures VALUES (%s, 'bad')", (tenant,))
    retried = _cli(
        "quarantine",
        "retry",
        str(entry["id"]),
        "--reason",
        "downstream fixed",
        "--by",
        "ops-bob",
        "--yes",
        home=home,
    )
    assert retried.returncode == 0, retried.stderr
    assert wait_until(lambda: len(effects(admin, tenant)) == 8, 60, 0.3)
    assert [v for _, d, _, v, _ in effects(admin, tenant) if d == "bad"] == [1, 2, 3]
    exactly_once(admin, tenant, 8)
    [entry] = quarantined(admin, tenant)
    assert entry["status"] == "resolved"
    again = _cli("quarantine", "discard", str(entry["id"]), "--reason", "late", "--yes", home=home)
    assert again.returncode == 1 and "QuarantineEntryClosed" in again.stderr
    missing = _cli("quarantine", "show", "999999999", home=home)
    assert missing.returncode == 1 and "QuarantineEntryNotFound" in missing.stderr
    assert proc.poll() is None


def test_header_filter_skips_without_decoding_and_malformed_bytes_are_quarantined(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
    wire: Wire,
) -> None:
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 3)
    relays.run_once()
    to_us = Wire(wire.settings, relays.topic)
    # Not for this consumer by its headers: never decoded, so garbage is fine.
    for event_type, owner in (("shipped", "review"), ("created", "someone-else")):
        to_us.produce(
            b"\xffnot avro", key=f"{tenant}/x", event_type=event_type, owner=owner, tenant=tenant
        )
    to_us.produce(
        b"\xffnot avro",
        key=f"{tenant}/x",
        event_type="created",
        owner="review",
        tenant="another-tenant",
    )
    # For this consumer by its headers, but not an event: quarantined, loop goes on.
    to_us.produce(
        b"\x00\x00\x00\x00\x07garbage",
        key=f"{tenant}/y",
        event_type="created",
        owner="review",
        tenant=tenant,
    )
    proc = consumers.start("review", review, "--reader-schema", "1")  # a v1 reader, v2 events
    wait_effects(admin, tenant, 3)
    assert wait_until(lambda: len(quarantined(admin, tenant)) == 1, 60, 0.3)
    [entry] = quarantined(admin, tenant)
    # Its body cannot be read, but the eventId header names it (the key, for this fake).
    assert entry["category"] == "malformed" and entry["event_id"] == f"{tenant}/y"
    assert entry["kafka_offset"] >= 0 and bytes(entry["message_value"]).endswith(b"garbage")
    # The filtered records' key lands on its own partition, read apart from the others:
    # counted soon, not necessarily by the time the quarantined one is.
    assert wait_until(
        lambda: consumers.metric(proc, "handoff_consumer_events_total", outcome="filtered") >= 3,
        30, 0.3,
    )  # fmt: skip
    assert "reader schema v1" in consumers.log_of()
    exactly_once(admin, tenant, 3)


@pytest.mark.disruptive
@pytest.mark.parametrize(
    ("batch", "deferred"),
    # Batched; and batch 1 with its units sent ahead (consumers/queued.py), the connection
    # lost with units queued on it.
    [("20", ""), ("1", "1")],
)
def test_a_database_restart_under_a_running_consumer_delays_work_and_loses_none(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
    local_stack: LocalStack,
    batch: str,
    deferred: str,
) -> None:
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 200)
    relays.run_once()
    proc = consumers.start("review", review, "--batch-size", batch, TEST_CONSUMER_SLEEP_S="0.01",
                           TEST_CONSUMER_DEFERRED=deferred)  # fmt: skip
    wait_effects(admin, tenant, 40)
    admin.close()
    local_stack.down(["postgres"])  # mid-stream: units fail, the connection is gone
    time.sleep(2)
    local_stack.up(["postgres"])
    with psycopg.connect(local_stack.env()["HANDOFF_DATABASE_URL"], autocommit=True) as again:
        wait_effects(again, tenant, 200, timeout=120)
        exactly_once(again, tenant, 200)
        assert quarantined(again, tenant) == []  # an outage is not the events' fault
    assert proc.poll() is None, "the consumer should have reconnected, not exited"
    log = consumers.log_of()
    # The outage is logged as one: when it began and when it ended.
    assert log.count("the database unavailable") == 1 and "reconnecting" in log, log[-3000:]
    assert re.search(r"the database is back after [0-9.]+ s", log), log[-3000:]


@pytest.mark.disruptive
def test_a_kafka_outage_under_a_running_consumer_is_logged_as_one_and_loses_nothing(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
    local_stack: LocalStack,
) -> None:
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 40)
    relays.run_once()
    proc = consumers.start("review", review, "--batch-size", "10")
    wait_effects(admin, tenant, 40)
    local_stack.down(["kafka"])
    try:
        time.sleep(12)  # librdkafka retries its brokers many times a second meanwhile
    finally:
        local_stack.up(["kafka"])
    with HandoffClient.direct(creator) as client:
        for i in range(10):
            client.create(event_id=f"after-{i}", document_id=f"after-{i}", owner="review",
                          status="new")  # fmt: skip
    relays.run_once()
    wait_effects(admin, tenant, 50, timeout=120)
    exactly_once(admin, tenant, 50)
    assert proc.poll() is None
    log = consumers.log_of()
    assert log.count("Kafka unavailable") == 1, log[-3000:]
    assert re.search(r"Kafka is back after [0-9.]+ s", log), log[-3000:]
    # Not one line per failed connect: librdkafka's own lines pass only below WARNING.
    noise = [line for line in log.splitlines() if " handoff.consumers.kafka " in line
             and " INFO " not in line and UNREACHABLE.search(line)]  # fmt: skip
    assert not noise, log[-3000:]


@pytest.mark.parametrize(
    ("processes", "batch", "max_deliveries"),
    # Alone in one process; batched across two (each the other's redelivery); blamed
    # for its batch. The other two mixes each cost 20 s of restarts and add no path.
    [(1, 1, 3), (2, 100, 3), (1, 8, 1)],
)
def test_an_event_that_kills_its_consumer_runs_max_deliveries_times_then_is_quarantined(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
    processes: int,
    batch: int,
    max_deliveries: int,
) -> None:
    """[SQS maxReceiveCount] The handler of the crashing event kills its process each
    time it runs: counted across processes, in batches and alone, it runs exactly
    max_deliveries times (its batch's run counted), then the event is quarantined and
    the others all apply. With max_deliveries 1 an event is given one run alone before
    it is blamed for its batch, so a batch of several gives it two."""
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 12)
    with HandoffClient.direct(creator) as client:
        client.create(event_id="c-crash", document_id="doc-crash", owner="review", status="new",
                      data={"crash": True})  # fmt: skip
        for i in range(6):
            client.create(event_id=f"c-late-{i}", document_id=f"doc-late-{i}", owner="review",
                          status="new")  # fmt: skip
    relays.run_once()
    env = {"HANDOFF_CONSUMER_MAX_DELIVERIES": str(max_deliveries)}
    running = [consumers.start("review", review, "--batch-size", str(batch), **env)
               for _ in range(processes)]  # fmt: skip
    deaths = 0

    def through() -> bool:
        nonlocal deaths
        for i, proc in enumerate(running):
            if proc.poll() is not None:  # only the crashing event ends a process
                assert proc.returncode == -signal.SIGKILL, consumers.log_of()
                deaths += 1
                running[i] = consumers.start("review", review, "--batch-size", str(batch), **env)
        return len(effects(admin, tenant)) == 18 and len(quarantined(admin, tenant)) == 1

    assert wait_until(through, 240, 0.2), f"not through after {deaths} deaths"
    [entry] = quarantined(admin, tenant)
    assert entry["document_id"] == "doc-crash" and entry["category"] == "handler_error"
    runs = max_deliveries if max_deliveries > 1 or batch == 1 else 2
    assert deaths == runs, f"the crashing handler ran {deaths} times, not {runs}"
    assert f"stopped {max_deliveries} time(s)" in entry["error"]
    exactly_once(admin, tenant, 18)


def test_static_membership_a_killed_process_comes_back_as_the_same_member(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
    migrated: Any,
) -> None:
    """[Kafka group.instance.id] The process joins as a static member; killed and started
    again with the same id it takes its partitions back and nothing is lost or doubled."""
    from confluent_kafka.admin import AdminClient

    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 60)
    relays.run_once()
    slow = {"TEST_CONSUMER_SLEEP_S": "0.05", "HANDOFF_CONSUMER_SESSION_TIMEOUT_S": "30"}
    first = consumers.start("review", review, "--instance-id", "review-1", "--batch-size", "5",
                            **slow)  # fmt: skip
    assert wait_until(lambda: len(effects(admin, tenant)) >= 10, 60)
    group = f"handoff.{tenant}.review"
    admin_client = AdminClient({"bootstrap.servers": migrated.kafka_bootstrap})
    described = admin_client.describe_consumer_groups([group])[group].result(timeout=15)
    assert [m.group_instance_id for m in described.members] == ["review-1"]
    first.kill()
    first.wait(10)
    consumers.start("review", review, "--instance-id", "review-1", "--batch-size", "5")
    wait_effects(admin, tenant, 60)
    exactly_once(admin, tenant, 60)


def test_a_second_process_with_the_same_instance_id_ends_the_fenced_one_saying_why(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
) -> None:
    """Kafka fences the member whose static id another took. Before, the fenced process
    logged one warning and went on polling a dead client: alive, doing nothing. Now it
    exits saying what to fix, and the member with the id does the work."""
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 20)
    relays.run_once()
    both = [consumers.start("review", review, "--instance-id", "review-1", "--batch-size", "5")]
    assert wait_until(lambda: len(effects(admin, tenant)) >= 1, 60)
    both.append(consumers.start("review", review, "--instance-id", "review-1", "--batch-size",
                                "5"))  # fmt: skip
    logs = [consumers.logs / f"consumer-{consumers.topic}-{n}.log" for n in range(2)]

    def one_ended() -> bool:
        return any(proc.poll() is not None for proc in both)

    assert wait_until(one_ended, 60), " | ".join(log.read_text()[-2000:] for log in logs)
    [fenced] = [n for n, proc in enumerate(both) if proc.poll() is not None]
    assert both[fenced].returncode == 1
    said = " ".join(logs[fenced].read_text().split())
    assert "instance id ('review-1')" in said and "give each process its own" in said, said
    assert both[1 - fenced].poll() is None
    wait_effects(admin, tenant, 20)
    exactly_once(admin, tenant, 20)


def test_idle_exit_counts_from_the_end_of_the_work_not_from_the_poll(
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
) -> None:
    """``--idle-exit 1`` with polls that take longer than a second to handle (events of
    100 ms each, a poll takes what is buffered): the process takes every event, then
    exits on its own."""
    creator, review = service("creator", can_create=True), service("review")
    _create(creator, 60)
    relays.run_once()
    proc = consumers.start("review", review, "--idle-exit", "1", TEST_CONSUMER_SLEEP_S="0.1")
    assert proc.wait(120) == 0, consumers.log_of()
    exactly_once(admin, tenant, 60)
