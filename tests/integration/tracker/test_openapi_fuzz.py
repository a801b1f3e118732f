"""Schemathesis over the OpenAPI: generated requests, valid and not, never a 5xx.

Every operation of the API (emit and query) is called with a real credential
of a fresh tenant against a real ``handoff serve`` and database. Besides "no
server error", each answer must use a documented status code and content
type, and match its documented schema.

The operations come from the application's own OpenAPI document (built
without a server, so pytest can name one test per operation); the served
document is checked to be that same one.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from handoff.core.identity import Credential
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.tracker.app import create_app

SPEC = create_app(HandoffSettings()).openapi()
OPERATIONS = {
    op.label: op
    for op in (r.ok() for r in schemathesis.openapi.from_dict(SPEC).get_all_operations())
}


@pytest.fixture(scope="module")
def fuzzer(migrated: Any) -> Credential:
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        return add_service(conn, "fuzzer", tenant=f"fuzz-{uuid.uuid4().hex[:8]}", can_create=True)


def test_the_served_document_is_the_one_fuzzed(api_url: str) -> None:
    assert httpx.get(f"{api_url}/openapi.json", timeout=10).json() == SPEC


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_no_server_errors(label: str, api_url: str, fuzzer: Credential) -> None:
    @given(case=OPERATIONS[label].as_strategy())
    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def call(case: Any) -> None:
        case.call_and_validate(
            base_url=api_url,
            headers={"Authorization": f"Bearer {fuzzer.token}"},
            checks=[
                not_a_server_error,
                status_code_conformance,
                content_type_conformance,
                response_schema_conformance,
            ],
            timeout=10,
        )

    call()
