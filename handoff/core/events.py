"""The event contract: Avro schemas from ``handoff/schemas/``, the envelope, the wire format.

Events travel in the Confluent wire format (magic byte 0, the registry's
4-byte schema id, then the Avro body), so any Confluent-compatible consumer
decodes them through the registry.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro
import orjson

from handoff.core.avro_writer import Writer, compile_writer
from handoff.core.errors import ConfigurationError, EventEncodingError
from handoff.core.micros import to_micros

SCHEMA_FAMILY = "handoff_event"
_VERSION_FILE = re.compile(r"^v(\d+)\.avsc$")
_TIMESTAMPS = ("occurredAt", "assignedAt", "dueAt", "completedAt")


@dataclass(frozen=True)
class EventSchema:
    version: int
    text: str

    @property
    def parsed(self) -> Any:
        return _parse(self.text)

    @cached_property
    def writer(self) -> Writer | None:
        """The compiled writer (see avro_writer), or None: fastavro writes it."""
        return compile_writer(json.loads(self.text))


@cache
def _parse(text: str) -> Any:
    return fastavro.parse_schema(json.loads(text))


def schemas_dir() -> Path:
    """``handoff/schemas/<family>/``: package data, so an installed wheel has them too."""
    folder = Path(str(resources.files("handoff") / "schemas" / SCHEMA_FAMILY))
    if not folder.is_dir():
        raise ConfigurationError(
            f"event schemas not found at {folder}; reinstall the handoff package"
        )
    return folder


def retained_versions(folder: Path | None = None) -> list[EventSchema]:
    """Every retained version, oldest first."""
    found = []
    for path in (folder or schemas_dir()).iterdir():
        if match := _VERSION_FILE.match(path.name):
            found.append(EventSchema(int(match.group(1)), path.read_text()))
    if not found:
        raise ConfigurationError(f"no v<N>.avsc schema in {folder or schemas_dir()}")
    return sorted(found, key=lambda s: s.version)


def current_schema() -> EventSchema:
    return retained_versions()[-1]


def to_record(payload: dict[str, Any], schema_version: int) -> dict[str, Any]:
    """The outbox payload (JSON from the emit transaction) as an Avro record.

    Timestamps arrive as microseconds since the epoch, Avro's own form; an
    ISO-8601 string (a row written by hand; UTC unless it says otherwise) is
    accepted too, and becomes microseconds.
    """
    try:
        record = payload  # the caller's own dict, decoded for this call: no copy
        for field in _TIMESTAMPS:
            value = record.get(field)
            if isinstance(value, str):
                record[field] = to_micros(datetime.fromisoformat(value))
        record["data"] = orjson.dumps(record.get("data") or {}).decode()
        record["schemaVersion"] = schema_version
    except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
        raise EventEncodingError(f"bad outbox payload: {exc}") from exc
    return record


def encode(schema: EventSchema, schema_id: int, record: dict[str, Any]) -> bytes:
    """Confluent wire format: magic byte, schema id, then the Avro body."""
    header = b"\x00" + schema_id.to_bytes(4, "big")
    write = schema.writer
    try:
        if write is not None:  # the compiled writer: same bytes, a third of the time
            out = bytearray(header)
            write(out, record)
            return bytes(out)
        buffer = io.BytesIO()
        buffer.write(header)
        fastavro.schemaless_writer(buffer, schema.parsed, record, disable_tuple_notation=True)
        return buffer.getvalue()
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise EventEncodingError(f"does not fit schema v{schema.version}: {exc}") from exc


def decode(value: bytes, writer: EventSchema, reader: EventSchema | None = None) -> dict[str, Any]:
    """Decode a wire-format value written with ``writer`` (read as ``reader``)."""
    if len(value) < 5 or value[0] != 0:
        raise EventEncodingError("not Confluent wire format (magic byte 0 + schema id)")
    result = fastavro.schemaless_reader(
        io.BytesIO(value[5:]), writer.parsed, (reader or writer).parsed
    )
    if not isinstance(result, dict):
        raise EventEncodingError("the value is not an event record")
    return result
