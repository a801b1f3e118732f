"""BACKWARD_TRANSITIVE, checked locally: the newest schema must read data of every older one.

For each retained version we write sample records (every union branch,
nulls and values) and read them back with the current schema, as a
consumer on the new schema reads old events from a topic.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import fastavro

from handoff.core.events import EventSchema


def _sample(schema: Any, branch: int) -> Any:
    """A value of ``schema``; ``branch`` picks first (0) or last (-1) union members."""
    if isinstance(schema, list):
        return _sample(schema[branch], branch)
    if isinstance(schema, str):
        return {
            "null": None,
            "boolean": True,
            "int": 7,
            "long": 7,
            "float": 1.5,
            "double": 1.5,
            "string": "sample",
            "bytes": b"sample",
        }[schema]
    kind = schema["type"]
    if schema.get("logicalType", "").startswith("timestamp"):
        return datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    if kind == "record":
        return {f["name"]: _sample(f["type"], branch) for f in schema["fields"]}
    if kind == "array":
        return [_sample(schema["items"], branch)]
    if kind == "map":
        return {"k": _sample(schema["values"], branch)}
    if kind == "enum":
        return schema["symbols"][0]
    if kind == "fixed":
        return b"\x00" * schema["size"]
    return _sample(kind, branch)


def problems(versions: list[EventSchema]) -> list[str]:
    """Why the newest version cannot read an older one; empty when compatible."""
    *older, current = versions
    found = []
    for old in older:
        for branch in (0, -1):
            out = io.BytesIO()
            fastavro.schemaless_writer(out, old.parsed, _sample(old.parsed, branch))
            out.seek(0)
            try:
                fastavro.schemaless_reader(out, old.parsed, current.parsed)
            except Exception as exc:  # fastavro raises several kinds on resolution
                found.append(
                    f"v{current.version} cannot read data written with v{old.version}: {exc}"
                )
                break
    return found
