"""Reading a message: the writer's schema by id from the registry, the consumer's reader schema.

A consumer built against schema v1 reads v2 events: Avro resolution drops
the fields its reader schema does not know. The writer schemas are fetched
once per id and cached for the life of the process (ids are immutable).

Failures are classified here, never raised as something else: bytes that
are not the wire format, an id the registry does not know, a body that
does not fit its schema and an envelope that fails validation are
``MalformedEvent``; a registry that cannot be reached is ``Unavailable``
(the message is taken again later, it is not the message's fault).
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from handoff.consumers.event import Event, Position, from_record
from handoff.core.errors import ConfigurationError, MalformedEvent, Unavailable
from handoff.core.events import EventSchema, retained_versions


def reader_schema(version: int | None) -> EventSchema:
    """The retained schema ``version`` (None: the newest this package holds)."""
    versions = retained_versions()
    if version is None:
        return versions[-1]
    for schema in versions:
        if schema.version == version:
            return schema
    held = ", ".join(str(s.version) for s in versions)
    raise ConfigurationError(f"no reader schema v{version}; this package holds {held}")


class Decoder:
    """Wire-format bytes to an ``Event``, through the registry and a reader schema."""

    def __init__(self, registry_url: str, reader: EventSchema) -> None:
        self._registry = SchemaRegistryClient({"url": registry_url, "timeout": 10})
        self._reader = reader
        self._reader_text = _canonical(reader.text)
        # schema id -> (writer schema, reader schema or None when they are equal)
        self._writers: dict[int, tuple[Any, Any]] = {}

    @property
    def reader_version(self) -> int:
        return self._reader.version

    def _schemas(self, schema_id: int) -> tuple[Any, Any]:
        found = self._writers.get(schema_id)
        if found is not None:
            return found
        try:
            text = self._registry.get_schema(schema_id).schema_str
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise MalformedEvent(f"schema id {schema_id} is unknown to the registry") from exc
            if 400 <= exc.http_status_code < 500:
                raise MalformedEvent(f"registry refused schema id {schema_id}: {exc}") from exc
            raise Unavailable(f"schema registry error for id {schema_id}: {exc}") from exc
        except Exception as exc:  # connection problems arrive as several types
            raise Unavailable(f"schema registry unreachable: {exc}") from exc
        if text is None:
            raise MalformedEvent(f"schema id {schema_id} has no schema text")
        try:
            writer = fastavro.parse_schema(json.loads(text))
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            raise MalformedEvent(f"schema id {schema_id} is not an Avro schema: {exc}") from exc
        # Same schema: no resolution step on every read.
        reader = None if _canonical(text) == self._reader_text else self._reader.parsed
        self._writers[schema_id] = (writer, reader)
        return writer, reader

    def decode(self, value: bytes | None, position: Position) -> Event:
        if value is None or len(value) < 5 or value[0] != 0:
            raise MalformedEvent("not Confluent wire format (magic byte 0 + 4-byte schema id)")
        writer, reader = self._schemas(int.from_bytes(value[1:5], "big"))
        try:
            body = io.BytesIO(value)  # shares the bytes: no copy of the body
            body.seek(5)
            record = fastavro.schemaless_reader(body, writer, reader)
        except Exception as exc:  # fastavro raises many types for bad bytes
            raise MalformedEvent(f"the body does not fit its schema: {exc!r}") from exc
        if not isinstance(record, dict):
            raise MalformedEvent("the value is not an event record")
        return from_record(record, position)

    def close(self) -> None:
        self._registry.close()


def _canonical(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
