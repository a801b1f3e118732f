"""The relay's registry plumbing and its headers (Kafka clients: core/kafka.py)."""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from handoff.core.cloudevents import cloudevent_headers
from handoff.core.errors import ConfigurationError, Unavailable
from handoff.core.events import EventSchema, retained_versions

log = logging.getLogger("handoff.relay")

COMPATIBILITY = "BACKWARD_TRANSITIVE"
CONFLICT_TRIES = 3


def register_schemas(registry_url: str, topics: list[str]) -> tuple[EventSchema, dict[str, int]]:
    """Register every retained version under ``<topic>-value``, oldest first.

    The subject's compatibility is set to BACKWARD_TRANSITIVE before, so the
    registry itself refuses a version that cannot read all earlier ones.
    Returns the current schema and its id per topic.
    """
    versions = retained_versions()
    ids: dict[str, int] = {}
    with SchemaRegistryClient({"url": registry_url, "timeout": 15}) as registry:
        for topic in topics:
            subject = f"{topic}-value"
            try:
                ids[topic] = _register_subject(registry, subject, versions)
            except SchemaRegistryError as exc:
                if exc.http_status_code >= 500:
                    # The registry's own trouble (e.g. its database restarted
                    # under it): the relay's setup loop waits and tries again.
                    raise Unavailable(f"schema registry error for {subject}: {exc}") from exc
                raise ConfigurationError(
                    f"registry refused the event schema for {subject}: {exc}; "
                    "run make schemas-check"
                ) from exc
            except Exception as exc:  # connection problems surface as various types
                raise Unavailable(f"schema registry at {registry_url}: {exc}") from exc
    return versions[-1], ids


def _register_subject(
    registry: SchemaRegistryClient, subject: str, versions: list[EventSchema]
) -> int:
    """The subject's rule and versions; the id of the newest.

    Why the second try: relays starting together on a new subject race to
    create its compatibility rule, and Apicurio answers the loser 409 ("a
    rule named 'COMPATIBILITY' already exists"; seen with two relays started
    at once). Every step is idempotent, so the loser goes again and now
    updates the rule. A schema the rule refuses is refused the second time
    too, and that 409 is raised.
    """
    for attempt in range(CONFLICT_TRIES):
        try:
            registry.set_compatibility(subject_name=subject, level=COMPATIBILITY)
            schema_id = 0
            for version in versions:
                schema_id = registry.register_schema(subject, Schema(version.text, "AVRO"))
            return schema_id
        except SchemaRegistryError as exc:
            if exc.http_status_code != 409 or attempt == CONFLICT_TRIES - 1:
                raise
            log.info("registry conflict on %s (%s); setting it up again", subject, exc)
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def headers(payload: dict[str, Any], traceparent: str | None = None) -> list[Any]:
    """[EventBridge rule / Pipe filter] without decoding the value; ``eventId`` so that a
    consumer or a tool can deduplicate without decoding either. Then the same event's
    CloudEvents attributes (core/cloudevents.py), for tools that speak only those; and
    the emitting unit's trace context, as W3C's ``traceparent`` and as the CloudEvents
    distributed-tracing extension (telemetry/tracing.py)."""
    event_id, event_type = payload["eventId"].encode(), payload["eventType"].encode()
    tenant = payload["tenantId"].encode()
    written = [
        ("eventId", event_id),
        ("eventType", event_type),
        ("owner", (payload.get("owner") or "").encode()),
        ("tenant", tenant),
        ("version", str(payload["version"]).encode()),
        *cloudevent_headers(payload, event_id, event_type, tenant),
    ]
    if traceparent:
        trace = traceparent.encode()
        written += [("traceparent", trace), ("ce_traceparent", trace)]
    return written


def timing_headers(fetched_at: float) -> list[Any]:
    """``trace_timing``'s headers: when a batch was fetched and when its produce began,
    epoch microseconds (a latency breakdown's relay segments, make bench-hop)."""
    return [
        ("relayFetchedAt", str(int(fetched_at * 1e6)).encode()),
        ("relayProducedAt", str(int(time.time() * 1e6)).encode()),
    ]
