"""The request fingerprint computed in Python (the DynamoDB store's) is PostgreSQL's:
``jsonb_text`` against ``::jsonb::text`` and ``epoch`` against ``extract(epoch …)`` on the
real server, over generated JSON and instants."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handoff.core.fingerprint import epoch, jsonb_text

# What a client's JSON can hold; PostgreSQL's jsonb refuses \u0000 in strings.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
           | st.floats(allow_nan=False, allow_infinity=False) | TEXT)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
CHECKS = settings(max_examples=300, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


@CHECKS
@given(value=VALUES)
def test_jsonb_text_is_what_postgresql_prints(admin: psycopg.Connection[Any], value: Any) -> None:
    # The client library sends json.dumps of the request's data; the server prints it.
    row = admin.execute("SELECT %s::jsonb::text", (json.dumps(value),)).fetchone()
    assert row is not None and jsonb_text(value) == row[0]


@CHECKS
@given(at=st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),
                       timezones=st.just(UTC)))  # fmt: skip
def test_epoch_is_postgresqls_extract(admin: psycopg.Connection[Any], at: datetime) -> None:
    row = admin.execute("SELECT extract(epoch FROM %s::timestamptz)::text", (at,)).fetchone()
    assert row is not None and str(epoch(at)) == row[0]


def test_awkward_numbers_and_keys(admin: psycopg.Connection[Any]) -> None:
    value = {"bb": -0.0, "a": 1e-07, "ccc": 1e20, "é": "tab\there\u001f", "b": [1.5e300, 0.1]}
    row = admin.execute("SELECT %s::jsonb::text", (json.dumps(value),)).fetchone()
    assert row is not None and jsonb_text(value) == row[0]
    assert str(epoch(datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC))) == "-0.500000"
    assert epoch(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=1)) == epoch(
        datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC))  # fmt: skip
