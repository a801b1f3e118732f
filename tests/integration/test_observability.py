"""The dashboard and the alert rules (deploy/) read metrics the processes really export.

A relay, a consumer with effect executors, the API and ``handoff audit --every``
run as processes; one order goes through the API, the relay, the consumer and
the sandbox provider; then every process's /metrics is scraped and each metric
the dashboard and the rules use must be there, with every label they use and
every label value they match exactly.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from handoff.core.kafka import ensure_topics
from handoff.core.settings import HandoffSettings
from handoff.rehearsal.orders import PAYMENTS
from handoff.rehearsal.rows import Rehearsal
from handoff.relay.kafka_io import headers
from handoff.stack.layout import pick_port
from handoff.stack.procs import wait_until
from tests.fix_effects import SandboxProcess, env_for
from tests.fix_relay import Relays
from tests.observability import SYNTHETIC, exported, needs

ROOT = Path(__file__).resolve().parents[2]


class Started:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, args: list[str], env: dict[str, str]) -> None:
        with (self.logs / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "handoff.cli", *args], env=env,
                                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append((name, proc))

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()[-3000:]

    def stop(self) -> None:
        for _, proc in self.procs:
            proc.terminate()
        for _, proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    found = Started(tmp_path)
    try:
        yield found
    finally:
        found.stop()


def _scrape(url: str) -> str | None:
    try:
        answer = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None
    return answer.text if answer.status_code == 200 else None


def test_every_metric_and_label_the_dashboard_and_rules_use_is_exported(
    migrated: HandoffSettings, api_url: str, relays: Relays, rehearsal: Rehearsal,
    sandbox: SandboxProcess, started: Started,
) -> None:  # fmt: skip
    taken: set[int] = set()
    ports = {}
    for name, preferred in (("relay", 19400), ("consumer", 19401), ("audit", 19410)):
        ports[name] = pick_port(preferred, taken)
        taken.add(ports[name])
    topic = f"test.observed.{uuid.uuid4().hex[:8]}"
    ensure_topics(migrated.kafka_bootstrap, [topic], 1)

    relays.start("--metrics-port", str(ports["relay"]), METRICS_INTERVAL_S="0.5")
    env = env_for(migrated, HANDOFF_CONSUMER_CREDENTIAL=rehearsal.creds[PAYMENTS].token,
                  HANDOFF_SANDBOX_URL=sandbox.url, HANDOFF_EFFECTS_POLL_S="0.2")  # fmt: skip
    started.start("consumer", ["consume", "tests.effect_apps:app", "--topic", topic,
                               "--executors", "1", "--metrics-port", str(ports["consumer"])],
                  env)  # fmt: skip
    started.start("audit", ["audit", "--tenant", rehearsal.tenant, "--every", "1",
                            "--metrics-port", str(ports["audit"])], env_for(migrated))  # fmt: skip

    # One order, paid: an emit through the API's process is the shop's order (HTTP),
    # the event is the relay's, the consumer's unit charges it through the sandbox.
    doc, payload = rehearsal.order()
    shop = httpx.Client(
        base_url=api_url,
        timeout=10,
        headers={"Authorization": f"Bearer {rehearsal.creds['shop'].token}"},
    )
    with shop:
        created = shop.post("/v1/documents", json={
            "eventId": str(uuid.uuid4()), "documentId": f"http-{doc}", "owner": "shop",
            "status": "new"})  # fmt: skip
        assert created.status_code == 201, created.text
        assert shop.get(f"/v1/documents/http-{doc}").status_code == 200
    value = rehearsal.item(payload).position.value
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": migrated.kafka_bootstrap})
    producer.produce(topic, value, doc.encode(), headers=headers(payload))
    assert producer.flush(30) == 0

    def paid() -> bool:
        row = rehearsal.admin.execute(
            "SELECT status FROM handoff.document_state WHERE tenant_id = %s AND document_id = %s",
            (rehearsal.tenant, doc),
        ).fetchone()
        return row is not None and row[0] == "paid"

    assert wait_until(paid, 60), started.log("consumer")

    urls = {
        "api": f"{api_url}/metrics",
        **{name: f"http://127.0.0.1:{port}/metrics" for name, port in ports.items()},
    }
    wanted = needs()

    def all_there() -> bool:
        texts = [_scrape(url) for url in urls.values()]
        if any(text is None for text in texts):
            return False
        labels, _ = exported([t for t in texts if t is not None])
        return all(m in labels for m in wanted.labels if m not in SYNTHETIC)

    # The gauges come with each process's first measurement (every 0.5-5 s).
    wait_until(all_there, 30)
    texts = {name: _scrape(url) for name, url in urls.items()}
    assert all(texts.values()), {n: started.log(n) for n in ("consumer", "audit")}
    labels, values = exported([t for t in texts.values() if t is not None])
    missing = []
    for metric, used in sorted(wanted.labels.items()):
        if metric in SYNTHETIC:
            continue
        if metric not in labels:
            missing.append(f"{metric}: not exported")
        elif not used <= labels[metric]:
            missing.append(f"{metric}: no label {sorted(used - labels[metric])}")
        for pair in wanted.values.get(metric, ()):
            if pair not in values[metric]:
                missing.append(f"{metric}: no series with {pair[0]}={pair[1]!r}")
    assert not missing, "\n".join(missing)
    assert len(wanted.labels) >= 20  # the check covered the whole dashboard and rule set
