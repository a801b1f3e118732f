"""The compiled Avro writer writes exactly fastavro's bytes, and refuses what fastavro refuses."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handoff.core.avro_writer import compile_writer, zigzag
from handoff.core.errors import EventEncodingError
from handoff.core.events import EventSchema, encode, retained_versions

VERSIONS = retained_versions()

_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=300)
_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "string": _TEXT,
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "boolean": st.booleans(),
}


def _strategy(kind: Any) -> st.SearchStrategy[Any]:
    if isinstance(kind, list):
        return st.none() | _strategy(kind[1])
    return _PRIMITIVES[kind["type"] if isinstance(kind, dict) else kind]


def records(schema: EventSchema) -> st.SearchStrategy[dict[str, Any]]:
    fields = json.loads(schema.text)["fields"]
    return st.fixed_dictionaries({f["name"]: _strategy(f["type"]) for f in fields})


def fastavro_bytes(schema: EventSchema, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema.parsed, record)
    return out.getvalue()


@pytest.mark.parametrize("schema", VERSIONS, ids=lambda s: f"v{s.version}")
@settings(max_examples=400)
@given(data=st.data())
def test_same_bytes_as_fastavro(schema: EventSchema, data: st.DataObject) -> None:
    record = data.draw(records(schema))
    write = compile_writer(json.loads(schema.text))
    assert write is not None
    out = bytearray()
    write(out, record)
    assert bytes(out) == fastavro_bytes(schema, record)


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_matches_fastavro_longs(n: int) -> None:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema("long"), n)
    assert zigzag(n) == out.getvalue()


def _valid(schema: EventSchema) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for f in json.loads(schema.text)["fields"]:
        kind = f["type"]
        base = kind[1] if isinstance(kind, list) else kind
        base = base["type"] if isinstance(base, dict) else base
        record[f["name"]] = {"string": "x", "int": 1, "long": 2, "boolean": True}[base]
    return record


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("version", 2**31),  # int out of range
        ("version", "7"),
        ("occurredAt", 2**63),
        ("occurredAt", 1.5),
        ("eventId", None),  # not a union
        ("eventId", b"bytes"),
        ("completed", "yes"),
        ("owner", 5),  # union of null and string
        ("eventId", "\ud800"),  # not encodable as UTF-8
    ],
)
def test_bad_values_are_refused(field: str, bad: Any) -> None:
    schema = VERSIONS[-1]
    record = _valid(schema) | {field: bad}
    with pytest.raises(EventEncodingError):
        encode(schema, 1, record)


def test_a_missing_field_is_refused() -> None:
    schema = VERSIONS[-1]
    record = _valid(schema)
    del record["eventId"]
    with pytest.raises(EventEncodingError):
        encode(schema, 1, record)


def test_other_schemas_fall_back_to_fastavro() -> None:
    assert (
        compile_writer({"type": "record", "name": "R", "fields": [{"name": "x", "type": "double"}]})
        is None
    )
    assert (
        compile_writer(
            {"type": "record", "name": "R", "fields": [{"name": "x", "type": ["string", "null"]}]}
        )
        is None
    )
    assert compile_writer({"type": "enum", "name": "E", "symbols": ["A"]}) is None
