"""Schemathesis over the OpenAPI: generated requests, valid and not, with every check.

Every operation of the API (emit and query) is called against a real
``handoff serve`` and database, as a service that may create documents, as
one that may not, and without a credential; with data that fits the schema
(positive) and data that does not (negative). All of schemathesis's checks
run on each answer: no server error; a documented status code, content type
and headers; a body matching its schema; invalid data rejected and valid
data accepted; required headers and auth enforced; unsupported methods
refused with Allow.

The credential is given the way the document declares it (the ``bearerAuth``
scheme, schemathesis's OpenAPI-aware auth), so negative cases that drop or
break it stay dropped. Three things the document states in words because
JSON Schema cannot are given to the generator here, from the product's own
rules: the naming rule's formats (``handoff-id`` etc.: NFC, code points
outside the BMP; names are the tenant's registered services, as owners must
be), and, for valid data only, the few rules that join two
query parameters (Find's sort needs an owner; a time window's start comes
before its end; Find's data filter is JSON text).

The operations come from the application's own OpenAPI document (built
without a server, so pytest can name one test per operation); the served
document is checked to be that same one.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.generation.modes import GenerationMode

from handoff.cli import bootstrap
from handoff.core.identity import Credential
from handoff.core.models import parse_instant
from handoff.core.names import id_problem, label_problem
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings

# The app as handoff serve builds it (with the AsyncAPI route the composition root adds).
SPEC = bootstrap.tracker(HandoffSettings())[0].openapi()
LABELS = sorted(
    f"{method.upper()} {path}" for path, item in SPEC["paths"].items() for method in item
)
CALLERS = ("creator", "worker", "anonymous")
INTEGERS = ("expectedVersion", "runId")
# Per operation, caller and mode: about 2,500 requests in all in make test (two minutes);
# HANDOFF_FUZZ_EXAMPLES=150 for a longer run.
EXAMPLES = int(os.environ.get("HANDOFF_FUZZ_EXAMPLES", "25"))


def _valid(problem: Any, size: int) -> st.SearchStrategy[str]:
    return st.text(min_size=1, max_size=size).filter(lambda text: problem(text) is None)


# Instants within the range every reader can hold (the schema says which), any offset.
_OFFSETS = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                            timezone(timedelta(hours=-8))])  # fmt: skip
_INSTANTS = st.datetimes(min_value=datetime(1, 1, 3), max_value=datetime(9999, 12, 29),
                         timezones=_OFFSETS).map(datetime.isoformat)  # fmt: skip

for name, strategy in {
    "date-time": _INSTANTS,
    "handoff-id": _valid(id_problem, 40),
    "handoff-label": _valid(label_problem, 40),
    # Owners must be registered services of the tenant (422 UnknownOwner otherwise, a
    # rule of the data, not of the schema): the generator names the tenant's own.
    "handoff-name": st.sampled_from(["fuzzer", "worker"]),
}.items():
    schemathesis.openapi.format(name, strategy)


def _has_inputs(label: str) -> bool:
    """Whether the operation takes parameters or a body: only then is there data that does
    not fit its schema (negative generation of nothing is unsatisfiable)."""
    method, path = label.split(" ", 1)
    operation = SPEC["paths"][path][method.lower()]
    return bool(operation.get("parameters") or operation.get("requestBody"))


CASES = [
    (label, mode)
    for label in LABELS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or _has_inputs(label)
]


def _ordered(query: dict[str, Any], since: str, until: str) -> bool:
    if since not in query or until not in query:
        return True
    try:
        return bool(parse_instant(query[since]) < parse_instant(query[until]))
    except (ValueError, TypeError, OverflowError):
        return True  # not an instant at all: the schema's own business


def _joined_rules_hold(operation: str, query: dict[str, Any]) -> bool:
    """The rules that join two query parameters, which valid data must keep."""
    if operation == "/v1/find":
        sorted_by_time = query.get("sort", "id") != "id"
        if sorted_by_time and ("owner" not in query or query.get("state") == "completed"):
            return False
        if "data" in query:
            try:
                if not isinstance(json.loads(query["data"]), dict):
                    return False
            except ValueError:
                return False
        return _ordered(query, "assignedSince", "assignedUntil")
    if operation == "/v1/rejections":
        return _ordered(query, "since", "until")
    return True


def _schema(token: str | None, mode: GenerationMode) -> Any:
    auth = {"auth": {"openapi": {"bearerAuth": {"bearer": token}}}} if token else {}
    schema = schemathesis.openapi.from_dict(SPEC, config=SchemathesisConfig.from_dict(auth))
    if mode is GenerationMode.POSITIVE:

        @schema.hook
        def filter_query(context: Any, query: dict[str, Any] | None) -> bool:
            return _joined_rules_hold(context.operation.path, query or {})

        @schema.hook
        def map_body(context: Any, body: Any) -> Any:
            # JSON Schema's integer admits 2025.0; this API does not (its schema says so):
            # valid data writes versions and runs as integers.
            if isinstance(body, dict):
                return {k: int(v) if k in INTEGERS and isinstance(v, float) and v.is_integer()
                        else v for k, v in body.items()}  # fmt: skip
            return body

        @schema.hook
        def map_query(context: Any, query: dict[str, Any] | None) -> dict[str, Any] | None:
            if query and context.operation.path == "/v1/find" and "data" in query:
                return {**query, "data": json.dumps({"k": query["data"]})[:2000]}
            return query

    return schema


@pytest.fixture(scope="module")
def credentials(migrated: Any) -> dict[str, Credential]:
    tenant = f"fuzz-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        return {
            "creator": add_service(conn, "fuzzer", tenant=tenant, can_create=True),
            "worker": add_service(conn, "worker", tenant=tenant),
        }


def test_the_served_document_is_the_one_fuzzed(api_url: str) -> None:
    assert httpx.get(f"{api_url}/openapi.json", timeout=10).json() == SPEC


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(("label", "mode"), CASES, ids=[f"{op}-{m.value}" for op, m in CASES])
def test_every_check_holds(
    label: str,
    caller: str,
    mode: GenerationMode,
    api_url: str,
    credentials: dict[str, Credential],
) -> None:
    token = credentials[caller].token if caller in credentials else None
    method, path = label.split(" ", 1)
    operation = _schema(token, mode)[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def call(case: Any) -> None:
        case.call_and_validate(base_url=api_url, timeout=10)

    call()
