"""Avro record writers compiled from a schema: the relay's hot path.

Why this exists: fastavro's writer walks the schema for every record it
writes (union resolution, logical types); for the event envelope that is
~18 µs of the relay's ~60 µs per event, and the relay is CPU-bound. A writer
compiled once per schema into straight-line Python does the same in ~6 µs.

It covers exactly what the envelope uses: ``string``, ``int``, ``long``
(``timestamp-micros`` given as microseconds), ``boolean``, and unions of
``null`` with one of those. ``compile_writer`` returns ``None`` for any other
schema, and callers use fastavro, which also stays the reader. The output is
byte-for-byte fastavro's: a property test compares the two on generated
records of every retained schema version.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Writer = Callable[[bytearray, dict[str, Any]], None]

_INT = (-(2**31), 2**31 - 1)
_LONG = (-(2**63), 2**63 - 1)


def _varint_slow(z: int) -> bytes:
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Varints of 0..16383: string lengths and small numbers, by lookup.
_SMALL = [_varint_slow(z) for z in range(0x4000)]


def zigzag(n: int) -> bytes:
    """Avro's zig-zag varint of a 64-bit signed integer."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x4000:
        return _SMALL[z]
    if (1 << 49) <= z < (1 << 56):  # today's timestamps in microseconds: 8 bytes
        return bytes(
            (
                (z & 0x7F) | 0x80,
                (z >> 7 & 0x7F) | 0x80,
                (z >> 14 & 0x7F) | 0x80,
                (z >> 21 & 0x7F) | 0x80,
                (z >> 28 & 0x7F) | 0x80,
                (z >> 35 & 0x7F) | 0x80,
                (z >> 42 & 0x7F) | 0x80,
                z >> 49,
            )
        )
    return _varint_slow(z)


def length(n: int) -> bytes:
    return _SMALL[n << 1] if n < 0x2000 else zigzag(n)


class _Unsupported(Exception):
    pass


def _base(schema: Any) -> str:
    name = schema["type"] if isinstance(schema, dict) else schema
    if name not in ("string", "int", "long", "boolean"):
        raise _Unsupported(name)
    return str(name)


def _value(kind: str, v: str, field: str, ind: str) -> list[str]:
    """Statements that append value ``v`` of primitive ``kind``."""
    if kind == "string":
        return [f"{ind}b = {v}.encode()", f"{ind}out += length(len(b))", f"{ind}out += b"]
    if kind == "boolean":
        return [
            f"{ind}if {v} is True:",
            f"{ind}    out += b'\\x01'",
            f"{ind}elif {v} is False:",
            f"{ind}    out += b'\\x00'",
            f"{ind}else:",
            f"{ind}    raise TypeError('{field}: expected a boolean, got %r' % ({v},))",
        ]
    low, high = _INT if kind == "int" else _LONG
    return [
        f"{ind}if not {low} <= {v} <= {high}:",
        f"{ind}    raise ValueError('{field}: %r is out of range for {kind}' % ({v},))",
        f"{ind}out += zigzag({v})",
    ]


def compile_writer(schema: dict[str, Any]) -> Writer | None:
    """A writer for records of ``schema`` (parsed JSON), or None if it is outside the subset."""
    if schema.get("type") != "record":
        return None
    lines = ["def write(out, r):"]
    try:
        for i, field in enumerate(schema["fields"]):
            name, kind, v = field["name"], field["type"], f"v{i}"
            if not name.isidentifier():
                return None
            if "default" in field:
                lines.append(f"    {v} = r.get({name!r}, {field['default']!r})")
            else:
                lines.append(f"    {v} = r[{name!r}]")
            if isinstance(kind, list):
                if len(kind) != 2 or kind[0] != "null":
                    return None
                lines += [f"    if {v} is None:", "        out += b'\\x00'", "    else:"]
                lines += ["        out += b'\\x02'", *_value(_base(kind[1]), v, name, " " * 8)]
            else:
                lines += _value(_base(kind), v, name, "    ")
    except _Unsupported:
        return None
    namespace: dict[str, Any] = {"zigzag": zigzag, "length": length}
    # Generated source, as dataclasses and attrs do: straight-line code is
    # what makes this fast. Only field names (checked identifiers) and
    # default values (repr) of our own schema files reach it.
    exec("\n".join(lines), namespace)
    write: Writer = namespace["write"]
    return write
