"""One trace across every hop, read back from a real Zipkin server.

A request carrying a W3C ``traceparent`` creates a document through ``handoff serve``;
the relay publishes it, consumer ``review`` hands it to ``finalization``, the relay
publishes that, and ``finalization`` records it. Every process exports to Zipkin
(OpenTelemetry's Zipkin exporter), and the trace Zipkin assembles must hold each
hop's span, each the child of the one before. And an effect: performed by the
executor under a span of the intending unit's trace, the provider given its context.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import Producer

from handoff.core.identity import Credential
from handoff.core.kafka import ensure_topics
from handoff.core.settings import HandoffSettings
from handoff.rehearsal.orders import PAYMENTS
from handoff.rehearsal.rows import Rehearsal
from handoff.relay.kafka_io import headers
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from handoff.stack.zipkin import ZipkinServer
from tests.fix_consumer import Consumers, wait_effects
from tests.fix_contract import serving, signed_in
from tests.fix_effects import SandboxProcess, env_for
from tests.fix_relay import Relays

pytestmark = pytest.mark.slow


def _child(spans: list[dict[str, Any]], parent: str, prefix: str) -> dict[str, Any] | None:
    """The earliest span named ``prefix…`` whose parent is the span ``parent``."""
    found = [s for s in spans if s.get("parentId") == parent and s["name"].startswith(prefix)]
    return min(found, key=lambda s: s["timestamp"]) if found else None


# The hops, each the child of the one before: the API's emit, the relay's publish of
# the created row, review's unit, the publish of the row that unit wrote, finalization's
# unit, and the publish of its handoff to archive.
HOPS = ("emit create", "publish", "consume review", "publish", "consume finalization", "publish")


def _hops(spans: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
    """As many of HOPS as the trace holds, from the caller's span down."""
    chain: list[dict[str, Any]] = []
    for prefix in HOPS:
        found = _child(spans, chain[-1]["id"] if chain else root, prefix)
        if found is None:
            break
        chain.append(found)
    return chain


def test_one_document_through_two_consumers_is_one_trace_with_every_hop_in_order(
    zipkin: ZipkinServer,
    local_stack: LocalStack,
    relays: Relays,
    consumers: Consumers,
    service: Callable[..., Credential],
    admin: psycopg.Connection[Any],
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in zipkin.env().items():
        monkeypatch.setenv(name, value)
    creator = service("creator", can_create=True)
    review, finalization = service("review"), service("finalization")
    service("archive")
    consumers.start("review", review, TEST_CONSUMER_NEXT="finalization")
    consumers.start("finalization", finalization, TEST_CONSUMER_NEXT="archive")
    relays.start()
    # The caller's own span: the trace every hop must join.
    trace_id, root = secrets.token_hex(16), secrets.token_hex(8)
    port = pick_port(18560, set())
    link = "http://traces.example/zipkin/traces/{trace_id}"
    with serving(local_stack, "traced-api", ["serve", "--port", str(port)], port=port,
                 HANDOFF_OTEL_TRACE_URL=link):  # fmt: skip
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/documents",
            json={"eventId": "c-1", "documentId": "doc-1", "owner": "review", "status": "new"},
            headers={
                "Authorization": f"Bearer {creator.token}",
                "traceparent": f"00-{trace_id}-{root}-01",
            },
            timeout=10,
        )
        assert answer.status_code == 201, answer.text
        wait_effects(admin, tenant, 2)

        stored = admin.execute(
            "SELECT version, traceparent FROM handoff.document_history"
            " WHERE tenant_id = %s AND document_id = 'doc-1' ORDER BY version",
            (tenant,),
        ).fetchall()
        assert [v for v, _ in stored] == [1, 2, 3]
        assert all(t and t[3:35] == trace_id for _, t in stored), stored

        # The tracker tells each version's trace: the history API and the document page.
        url = f"http://127.0.0.1:{port}"
        history = httpx.get(f"{url}/v1/documents/doc-1/history", timeout=10,
                            headers={"Authorization": f"Bearer {review.token}"})  # fmt: skip
        assert [i["traceId"] for i in history.json()["items"]] == [trace_id] * 3
        with signed_in(url, review) as browser:
            page = browser.get("/documents/doc-1").text
        assert page.count(f'href="{link.format(trace_id=trace_id)}"') == 3

        assert wait_until(lambda: len(_hops(zipkin.trace(trace_id), root)) == len(HOPS), 30, 0.5), (
            f"the trace holds {[s['name'] for s in zipkin.trace(trace_id)]}"
        )
    spans = zipkin.trace(trace_id)
    hops = _hops(spans, root)
    assert [s["localEndpoint"]["serviceName"] for s in hops] == [
        "handoff-api", "handoff-relay", "review", "handoff-relay", "finalization", "handoff-relay"
    ]  # fmt: skip
    assert [s["kind"] for s in hops] == ["SERVER", *["PRODUCER", "CONSUMER"] * 2, "PRODUCER"]
    # In time order too: each hop starts after the one it continues.
    starts = [s["timestamp"] for s in hops]
    assert starts == sorted(starts)
    # Inside each unit: its handler, and the handler's emit, each the child of the one before.
    for unit, event_type in ((hops[2], "created"), (hops[4], "routed")):
        handled = _child(spans, unit["id"], f"handle {event_type}")
        assert handled is not None, f"no handler span under {unit['name']}"
        assert _child(spans, handled["id"], "emit routed") is not None
        assert _child(spans, unit["id"], "claim") or _child(spans, unit["id"], "guard")
    assert all(s["traceId"] == trace_id for s in spans)


def test_an_effect_is_performed_in_the_trace_of_the_unit_that_intended_it(
    zipkin: ZipkinServer,
    migrated: HandoffSettings,
    rehearsal: Rehearsal,
    sandbox: SandboxProcess,
    tmp_path: Path,
) -> None:
    """The payments consumer's unit intends a charge; its executor performs it under a
    span that is the unit's child, sends the provider that span's ``traceparent``, and the
    outcome's emit (the next handoff) continues the same trace."""
    topic = f"test.tracing.{uuid.uuid4().hex[:8]}"
    ensure_topics(migrated.kafka_bootstrap, [topic], 1)
    doc, payload = rehearsal.order()
    trace_id, root = secrets.token_hex(16), secrets.token_hex(8)
    producer = Producer({"bootstrap.servers": migrated.kafka_bootstrap})
    value = rehearsal.item(payload).position.value
    producer.produce(topic, value, doc.encode(),
                     headers=headers(payload, f"00-{trace_id}-{root}-01"))  # fmt: skip
    assert producer.flush(30) == 0
    log = tmp_path / "payments.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "handoff.cli", "consume", "tests.effect_apps:app",
             "--topic", topic, "--executors", "1"],
            env=env_for(migrated, HANDOFF_CONSUMER_CREDENTIAL=rehearsal.creds[PAYMENTS].token,
                        HANDOFF_SANDBOX_URL=sandbox.url, HANDOFF_EFFECTS_POLL_S="0.2",
                        **zipkin.env()),
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:

        def performed() -> dict[str, Any] | None:
            spans = zipkin.trace(trace_id)
            unit = _child(spans, root, "consume payments")
            return _child(spans, unit["id"], "perform pay") if unit else None

        assert wait_until(lambda: performed() is not None, 60, 0.5), (
            f"{[s['name'] for s in zipkin.trace(trace_id)]}\n{log.read_text()[-3000:]}"
        )
    finally:
        proc.terminate()
        proc.wait(30)
    perform = performed()
    assert perform is not None and perform["kind"] == "CLIENT"
    assert perform["localEndpoint"]["serviceName"] == PAYMENTS
    [charge] = sandbox.payments(doc)
    said = f"payment {charge['id']} made in trace context 00-{trace_id}-{perform['id']}-"
    assert said in sandbox.log.read_text()
    # The outcome's emit (paid: on to shipping) is in the same trace, under the perform span.
    outcome = _child(zipkin.trace(trace_id), perform["id"], "outcome pay")
    assert outcome is not None and _child(zipkin.trace(trace_id), outcome["id"], "emit paid")
    [paid] = rehearsal.admin.execute(
        "SELECT traceparent FROM handoff.document_history"
        " WHERE tenant_id = %s AND document_id = %s AND event_type = 'paid'",
        (rehearsal.tenant, doc),
    ).fetchall()
    assert paid[0] == f"00-{trace_id}-{perform['id']}-01"
