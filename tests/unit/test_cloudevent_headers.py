"""The CloudEvents binary-mode headers of an outbox payload."""

from __future__ import annotations

from handoff.core.cloudevents import cloudevent_headers, source, time_text

PAYLOAD = {
    "eventId": "e-1", "eventType": "approved", "tenantId": "acme", "source": "review",
    "occurredAt": 1_764_000_000_000_001, "documentId": "invoice-42",
}  # fmt: skip


def test_attributes_follow_the_binding() -> None:
    got = dict(cloudevent_headers(PAYLOAD))
    assert got["ce_specversion"] == b"1.0"
    assert got["ce_id"] == b"e-1" and got["ce_type"] == b"approved"
    assert got["ce_subject"] == b"invoice-42" and got["ce_tenantid"] == b"acme"
    assert got["ce_source"] == b"/handoff/tenants/acme/services/review"
    assert got["ce_time"] == b"2025-11-24T16:00:00.000001Z"
    assert got["content-type"] == b"application/vnd.apache.avro+binary"


def test_source_is_a_uri_reference_for_any_name() -> None:
    assert source("a b", "x/y") == "/handoff/tenants/a%20b/services/x%2Fy"


def test_time_keeps_microseconds_and_the_epoch() -> None:
    assert time_text(0) == "1970-01-01T00:00:00.000000Z"
