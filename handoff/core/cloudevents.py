"""CloudEvents attributes of an event, as the Kafka protocol binding's binary mode.

Handoff's own headers (eventId, eventType, owner, tenant, version) are what its
consumers filter on. A tool that knows CloudEvents and nothing of Handoff (a
Knative source, an Event Gateway, a CloudEvents SDK) reads the same event from
these: ``ce_id`` to deduplicate, ``ce_type`` to route, ``ce_subject`` for the
document, ``ce_time`` for when it happened. The value stays the registry-framed
Avro body; binary mode is the one that leaves the value alone, and
``content-type`` says what it is.

Why binary mode and not structured: a structured event is a JSON (or Avro)
envelope around the data, which would change the value every consumer and the
registry read. The binding's own rule ("content-type" for ``datacontenttype``,
``ce_`` before every other attribute) is followed to the letter, so the SDKs'
``from_binary`` reads the event back (tests/integration/relay/test_cloudevents.py).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from handoff.core.micros import from_micros

SPEC_VERSION = b"1.0"

# What the value is: Avro framed as Confluent's serialisers frame it (magic
# byte, the registry's schema id, the Avro binary). No IANA type names that
# framing; the Confluent serdes and Apicurio's both use this one.
CONTENT_TYPE = b"application/vnd.apache.avro+binary"

# The context extension of the tenant: CloudEvents extension names are lower
# case letters and digits only.
TENANT_EXTENSION = "ce_tenantid"


def source(tenant: str, service: str) -> str:
    """The ``source`` attribute: a URI reference naming the emitting service in its tenant.

    Names are percent-encoded, so any tenant or service name gives a valid reference
    (the naming rule allows only URL-safe names today; this keeps it true if it widens).
    """
    return f"/handoff/tenants/{quote(tenant, safe='')}/services/{quote(service, safe='')}"


def time_text(micros: int) -> str:
    """RFC 3339 in UTC with microseconds, as the ``time`` attribute requires."""
    return from_micros(micros).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def cloudevent_headers(payload: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The binary-mode headers of an outbox payload (the envelope's fields, as JSON)."""
    return [
        ("ce_specversion", SPEC_VERSION),
        ("ce_id", payload["eventId"].encode()),
        ("ce_source", source(payload["tenantId"], payload["source"]).encode()),
        ("ce_type", payload["eventType"].encode()),
        ("ce_time", time_text(payload["occurredAt"]).encode()),
        ("ce_subject", payload["documentId"].encode()),
        (TENANT_EXTENSION, payload["tenantId"].encode()),
        ("content-type", CONTENT_TYPE),
    ]
