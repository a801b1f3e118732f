"""The CloudEvents Kafka binding's binary mode, read back by the official SDK."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from cloudevents.core.bindings.kafka import KafkaMessage, from_binary
from cloudevents.core.formats.json import JSONFormat

from handoff.core.settings import HandoffSettings
from tests.fix_relay import Relays, Workload, consume


class AvroBody(JSONFormat):
    """The SDK's JSON format, except that the data is the value's bytes as they are.

    Binary mode leaves the value to its content type: a registry-framed Avro body,
    which the SDK's default would try to read as JSON or UTF-8 text.
    """

    def read_data(self, body: bytes, datacontenttype: str | None) -> bytes:
        return body


def test_every_event_reads_as_a_cloudevent_with_the_envelopes_attributes(
    relays: Relays, workload: Workload, tenant: str, migrated: HandoffSettings
) -> None:
    workload.run(docs=2, steps=3, threads=1, prefix="ce")
    assert relays.run_once().returncode == 0
    by_doc = consume(migrated, relays.topic, tenant, workload.complete)
    events = [event for doc in sorted(by_doc) for event in by_doc[doc]]
    assert len(events) == 6  # two documents, a creation and two handoffs each

    seen_ids = set()
    for envelope in events:
        message = KafkaMessage(
            headers=envelope["_headers"], key=envelope["_key"], value=envelope["_value"]
        )
        ce = from_binary(message, AvroBody())
        attributes: dict[str, Any] = ce.get_attributes()
        assert ce.get_specversion() == "1.0"
        assert ce.get_id() == envelope["eventId"]
        assert ce.get_type() == envelope["eventType"]
        assert ce.get_source() == (
            f"/handoff/tenants/{quote(tenant, safe='')}/services/{envelope['source']}"
        )
        assert ce.get_subject() == envelope["documentId"]
        assert ce.get_time() == envelope["occurredAt"]  # to the microsecond, in UTC
        assert ce.get_datacontenttype() == "application/vnd.apache.avro+binary"
        assert ce.get_extension("tenantid") == tenant
        assert ce.get_extension("partitionkey") == f"{tenant}/{envelope['documentId']}"
        assert ce.get_data() == envelope["_value"]  # the Avro body, untouched
        assert set(attributes) == {
            "specversion", "id", "source", "type", "time", "subject",
            "datacontenttype", "tenantid", "partitionkey",
        }  # fmt: skip
        seen_ids.add((ce.get_source(), ce.get_id()))
    # source + id identify an event: a CloudEvents consumer deduplicates on them.
    assert len(seen_ids) == len(events)
