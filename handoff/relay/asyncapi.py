"""The AsyncAPI 3 document of Handoff's topics: what OpenAPI is for the HTTP API.

Built from what the relay itself uses, so it cannot drift from the wire:
the topic layout (``RelaySettings``: the default topic and the routes), the
newest retained Avro schema (the one the relay registers last under
``<topic>-value``), the headers it writes (kafka_io.headers, the CloudEvents
binding, the trace context) and the key. The Kafka bindings say how to find
the schema: the registry's URL, the Confluent framing of the value
(``schemaIdPayloadEncoding: confluent``) and the subject per topic
(``TopicIdStrategy``).

``docs/asyncapi.yaml`` is this document for the default settings and the
local stack's addresses (``handoff schemas asyncapi --check`` keeps it
current); the API serves the deployment's own at ``/asyncapi.yaml``.
``make test`` validates both with the AsyncAPI parser (scripts/asyncapi).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from handoff.core.cloudevents import CONTENT_TYPE, TENANT_EXTENSION
from handoff.core.events import current_schema, retained_versions
from handoff.core.settings import HandoffSettings
from handoff.relay.settings import RelaySettings

ASYNCAPI_VERSION = "3.0.0"
KAFKA_BINDING = "0.5.0"
AVRO_FORMAT = "application/vnd.apache.avro;version=1.9.0"
MESSAGE = "HandoffEvent"

_TEXT = {"type": "string"}

# Header name → (schema, description, always written). The wire's own order.
_TRACEPARENT = {"type": "string", "pattern": "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"}

HEADERS: dict[str, tuple[dict[str, Any], str, bool]] = {
    "eventId": (_TEXT, "The event's id (deduplicate on it without decoding).", True),
    "eventType": (_TEXT, "What happened, e.g. approved (filter without decoding).", True),
    "owner": (_TEXT, "The owner after the change; empty when the document completed.", True),
    "tenant": (_TEXT, "The tenant.", True),
    "version": (
        {"type": "string", "pattern": "^[1-9][0-9]*$"},
        "The document's version after the change, as decimal text.",
        True,
    ),
    "ce_specversion": ({"const": "1.0"}, "CloudEvents: the spec's version.", True),
    "ce_id": (_TEXT, "CloudEvents: the event id (= eventId).", True),
    "ce_source": (
        {"type": "string", "pattern": "^/handoff/tenants/[^/]+/services/[^/]+$"},
        "CloudEvents: the emitting service in its tenant (source + id is unique).",
        True,
    ),
    "ce_type": (_TEXT, "CloudEvents: the event type (= eventType).", True),
    "ce_time": (
        {"type": "string", "format": "date-time"},
        "CloudEvents: when the change was accepted (RFC 3339, UTC).",
        True,
    ),
    "ce_subject": (_TEXT, "CloudEvents: the document id.", True),
    TENANT_EXTENSION: (_TEXT, "CloudEvents extension: the tenant.", True),
    "content-type": (
        {"const": CONTENT_TYPE.decode()},
        "CloudEvents datacontenttype: the value is registry-framed Avro.",
        True,
    ),
    "traceparent": (
        _TRACEPARENT,
        "W3C trace context, when the change was written in a sampled trace "
        "(HANDOFF_OTEL_EXPORTER): the relay's publish span; a consumer continues it.",
        False,
    ),
    "ce_traceparent": (
        _TRACEPARENT,
        "CloudEvents distributed-tracing extension: the same context as traceparent.",
        False,
    ),
    "relayFetchedAt": (
        {"type": "string", "pattern": "^[0-9]+$"},
        "With HANDOFF_RELAY_TRACE_TIMING: when the relay fetched the row (epoch µs).",
        False,
    ),
    "relayProducedAt": (
        {"type": "string", "pattern": "^[0-9]+$"},
        "With HANDOFF_RELAY_TRACE_TIMING: when the relay produced it (epoch µs).",
        False,
    ),
}


def document(
    settings: HandoffSettings | None = None, relay: RelaySettings | None = None
) -> dict[str, Any]:
    """The document for these settings (defaults: the local stack's)."""
    settings = settings or HandoffSettings()
    relay = relay or RelaySettings()
    schema = current_schema()
    versions = ", ".join(f"v{v.version}" for v in retained_versions())
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for topic in relay.topics():
        channels[topic] = {
            "address": topic,
            "title": topic,
            "description": _routed_here(topic, relay),
            "messages": {MESSAGE: {"$ref": f"#/components/messages/{MESSAGE}"}},
            "bindings": {
                "kafka": {
                    "topic": topic,
                    "partitions": relay.topic_partitions,
                    "bindingVersion": KAFKA_BINDING,
                }
            },
        }
        ref = {"$ref": f"#/channels/{_pointer(topic)}"}
        message_ref = {"$ref": f"#/channels/{_pointer(topic)}/messages/{MESSAGE}"}
        operations[_operation_id("publish", topic)] = {
            "action": "send",
            "channel": ref,
            "title": f"The relay publishes to {topic}",
            "summary": "handoff relay: committed outbox rows, in order per document, "
            "at least once (consumers deduplicate on eventId).",
            "messages": [message_ref],
        }
        operations[_operation_id("consume", topic)] = {
            "action": "receive",
            "channel": ref,
            "title": f"Services consume {topic}",
            "summary": "handoff consume: each service in its own consumer group, "
            "filtering on the headers before decoding.",
            "messages": [message_ref],
        }
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "Handoff events",
            "version": f"{schema.version}.0.0",
            "description": (
                "Every change Handoff accepts, with the full state after it, published "
                "from the transactional outbox. One document's events share a key "
                "(tenant/document) and so a partition: they arrive in version order. "
                f"The value is Avro (schema v{schema.version}; the registry holds "
                f"{versions} under each topic's subject, BACKWARD_TRANSITIVE)."
            ),
        },
        "defaultContentType": CONTENT_TYPE.decode(),
        "servers": {
            "kafka": {
                "host": settings.kafka_bootstrap.split(",")[0],
                "protocol": "kafka",
                "description": "The Kafka cluster (bootstrap servers: "
                f"{settings.kafka_bootstrap}).",
                "bindings": {
                    "kafka": {
                        "schemaRegistryUrl": settings.schema_registry_url,
                        "schemaRegistryVendor": "confluent",
                        "bindingVersion": KAFKA_BINDING,
                    }
                },
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": {
                MESSAGE: {
                    "name": MESSAGE,
                    "title": "An accepted change",
                    "contentType": CONTENT_TYPE.decode(),
                    "headers": {
                        "type": "object",
                        "required": [name for name, (_, _, always) in HEADERS.items() if always],
                        "properties": {
                            name: {**shape, "description": text}
                            for name, (shape, text, _) in HEADERS.items()
                        },
                    },
                    "correlationId": {
                        "description": "The event id: the same change delivered twice "
                        "carries the same one.",
                        "location": "$message.header#/eventId",
                    },
                    "payload": {"schemaFormat": AVRO_FORMAT, "schema": json.loads(schema.text)},
                    "bindings": {
                        "kafka": {
                            "key": {
                                "type": "string",
                                "pattern": "^[^/]+/.+$",
                                "description": "tenant/document: a document's events share "
                                "a partition, so they stay in order.",
                            },
                            "schemaIdLocation": "payload",
                            "schemaIdPayloadEncoding": "confluent",
                            "schemaLookupStrategy": "TopicIdStrategy",
                            "bindingVersion": KAFKA_BINDING,
                        }
                    },
                }
            }
        },
    }


class _Dumper(yaml.SafeDumper):
    """Writes a dict used twice in full both times (no &id001 anchors: a reader
    of the document should not need YAML aliases, and some tools refuse them)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def as_yaml(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def _routed_here(topic: str, relay: RelaySettings) -> str:
    rules = [
        " and ".join(
            f"{name} {value}"
            for name, value in (("eventType", r.event_type), ("owner", r.owner))
            if value is not None
        )
        for r in relay.routes
        if r.topic == topic
    ]
    parts = [f"Events with {rule}" for rule in rules]
    if topic == relay.default_topic:
        parts.append("every event no route sends elsewhere")
    return "; ".join(parts) + " (first matching route wins; HANDOFF_RELAY_ROUTES)."


def _pointer(name: str) -> str:
    """A JSON pointer segment (RFC 6901)."""
    return name.replace("~", "~0").replace("/", "~1")


def _operation_id(verb: str, topic: str) -> str:
    return verb + "".join(part.capitalize() for part in topic.replace("-", ".").split("."))
