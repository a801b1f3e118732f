"""The AsyncAPI document names every header the relay writes (no drift)."""

from __future__ import annotations

from handoff.relay.asyncapi import HEADERS, document
from handoff.relay.kafka_io import headers, timing_headers
from handoff.relay.settings import RelaySettings, Route

PAYLOAD = {
    "eventId": "e-1", "eventType": "approved", "owner": "billing", "tenantId": "acme",
    "version": 3, "source": "review", "occurredAt": 1_764_000_000_123_456,
    "documentId": "invoice-42",
}  # fmt: skip


def test_every_header_written_is_described_and_always_written_ones_are_required() -> None:
    written = [name for name, _ in headers(PAYLOAD)]
    assert len(written) == len(set(written))
    always = {name for name, (_, _, required) in HEADERS.items() if required}
    assert set(written) == always
    assert {name for name, _ in timing_headers(0.0)} <= set(HEADERS) - always
    traced = {name for name, _ in headers(PAYLOAD, "00-" + "a" * 32 + "-" + "b" * 16 + "-01")}
    assert traced - set(written) == {"traceparent", "ce_traceparent"} <= set(HEADERS) - always


def test_routes_give_a_channel_and_two_operations_each() -> None:
    relay = RelaySettings.model_construct(
        default_topic="handoff.events",
        routes=[Route(topic="billing.events", owner="billing")],
        topic_partitions=12,
    )
    doc = document(relay=relay)
    assert list(doc["channels"]) == ["billing.events", "handoff.events"]
    billing = doc["channels"]["billing.events"]
    assert "owner billing" in billing["description"]
    assert billing["bindings"]["kafka"]["partitions"] == 12
    actions = sorted((op["action"], op["channel"]["$ref"]) for op in doc["operations"].values())
    assert actions == [
        ("receive", "#/channels/billing.events"), ("receive", "#/channels/handoff.events"),
        ("send", "#/channels/billing.events"), ("send", "#/channels/handoff.events"),
    ]  # fmt: skip
