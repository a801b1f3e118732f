"""Consumer lag out of the serving process: against a fresh broker (no
``__consumer_offsets`` yet, the group coordinator not ready, where librdkafka's offset
lookup ends its process with SIGSEGV), ``handoff serve`` answers the operate API and page
throughout, says since when lag is unavailable, and shows lag once the broker can tell."""

from __future__ import annotations

import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from handoff.core.identity import Credential
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import StackSettings, pick_port
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from tests.fix_contract import serving, signed_in


@pytest.fixture
def fresh_kafka(tmp_path: Path) -> Iterator[str]:
    """A broker of its own, just formatted: no internal topics yet."""
    stack = LocalStack(StackSettings(home=tmp_path / "fresh"))
    stack.up(["kafka"])
    try:
        yield stack.kafka.address()
    finally:
        stack.down(["kafka"])


def test_the_server_answers_throughout_while_a_fresh_broker_gets_its_coordinator(
    fresh_kafka: str, migrated: HandoffSettings, local_stack: LocalStack
) -> None:
    tenant = f"lag-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        viewer: Credential = add_service(conn, "viewer", tenant=tenant)
        add_service(conn, "worker", tenant=tenant)
    port = pick_port(18750, set())
    env = {"HANDOFF_KAFKA_BOOTSTRAP": fresh_kafka, "HANDOFF_TRACKER_LAG_INTERVAL_S": "0.5",
           "HANDOFF_TRACKER_LAG_TIMEOUT_S": "2"}  # fmt: skip
    with serving(local_stack, "lag-api", ["serve", "--port", str(port)], port=port, **env) as proc:
        url = f"http://127.0.0.1:{port}"
        # Meanwhile the worker's group is made: __consumer_offsets is created, the
        # coordinator moves into place, an offset is committed.
        topic = f"fresh-{uuid.uuid4().hex[:6]}"
        done = threading.Event()

        def make_the_group() -> None:
            producer = Producer({"bootstrap.servers": fresh_kafka})
            for i in range(4):
                producer.produce(topic, value=str(i).encode(), partition=0)
            producer.flush(30)
            group = Consumer({"bootstrap.servers": fresh_kafka,
                              "group.id": f"handoff.{tenant}.worker"})  # fmt: skip
            try:
                while not done.is_set():
                    try:
                        group.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
                        done.set()
                    except Exception:  # the coordinator is not there yet
                        done.wait(0.5)
            finally:
                group.close()

        maker = threading.Thread(target=make_the_group, daemon=True)
        maker.start()
        answers: dict[int, int] = {}
        headers = {"Authorization": f"Bearer {viewer.token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=15) as api:

            def lag_shown() -> bool:
                answer = api.get("/v1/operate")
                answers[answer.status_code] = answers.get(answer.status_code, 0) + 1
                assert proc.poll() is None, "the server died"
                view: dict[str, Any] = answer.json()
                return any(c["consumer"] == "worker" for c in view["consumers"])

            assert wait_until(lag_shown, 120, 0.1), f"lag never shown; answers {answers}"
        assert set(answers) == {200}, answers
        assert proc.poll() is None
        with signed_in(url, viewer) as ui:
            page = ui.get("/operate")
            assert page.status_code == 200 and 'data-consumer="worker"' in page.text
        maker.join(30)
        assert done.is_set()


def test_the_page_says_since_when_lag_is_unavailable(
    migrated: HandoffSettings, local_stack: LocalStack
) -> None:
    tenant = f"lag-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        viewer: Credential = add_service(conn, "viewer", tenant=tenant)
    port, nowhere = pick_port(18760, set()), pick_port(18770, set())
    env = {
        "HANDOFF_KAFKA_BOOTSTRAP": f"127.0.0.1:{nowhere}",  # nothing listens there
        "HANDOFF_TRACKER_LAG_INTERVAL_S": "0.5",
        "HANDOFF_TRACKER_LAG_TIMEOUT_S": "1",
    }
    with serving(local_stack, "lag-api-2", ["serve", "--port", str(port)], port=port, **env):
        headers = {"Authorization": f"Bearer {viewer.token}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as api:
            view: dict[str, Any] = {}

            def unavailable() -> bool:
                view.update(api.get("/v1/operate").json())
                return view["lagUnavailableSince"] is not None

            assert wait_until(unavailable, 60), view
            assert view["kafkaError"].startswith("consumer lag unavailable since ")
        with signed_in(f"http://127.0.0.1:{port}", viewer) as ui:
            assert "consumer lag unavailable since" in ui.get("/operate").text


def _sampler(server: psutil.Process) -> psutil.Process | None:
    found = [c for c in server.children() if "handoff.tracker.lag_sampler" in c.cmdline()]
    return found[0] if found else None


def test_a_crashed_sampler_is_recorded_and_started_again(
    migrated: HandoffSettings, local_stack: LocalStack
) -> None:
    tenant = f"lag-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        viewer: Credential = add_service(conn, "viewer", tenant=tenant)
    port = pick_port(18780, set())
    env = {"HANDOFF_TRACKER_LAG_INTERVAL_S": "0.5"}
    with serving(local_stack, "lag-api-3", ["serve", "--port", str(port)], port=port,
                 **env) as proc:  # fmt: skip
        server = psutil.Process(proc.pid)
        assert wait_until(lambda: _sampler(server) is not None, 30)
        first = _sampler(server)
        assert first is not None
        first.send_signal(signal.SIGSEGV)  # as librdkafka's crash would end it
        headers = {"Authorization": f"Bearer {viewer.token}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as api:
            assert api.get("/v1/operate").status_code == 200

            def replaced() -> bool:
                now = _sampler(server)
                return now is not None and now.pid != first.pid

            assert wait_until(replaced, 30), "the sampler was not started again"
            assert api.get("/v1/operate").status_code == 200
        assert proc.poll() is None
    log = local_stack.layout.log_file("lag-api-3").read_text()
    assert "the consumer-lag sampler was ended by signal 11; starting it again" in log
