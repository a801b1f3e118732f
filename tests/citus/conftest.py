"""The Citus suite's fixtures: the cluster of the stack, and a tenant of its own with three
services."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from handoff.core.identity import Credential
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.stack.citus import CitusCluster
from handoff.stack.local import LocalStack


@pytest.fixture(scope="module")
def cluster(local_stack: LocalStack, migrated: HandoffSettings) -> CitusCluster:
    if local_stack.citus is None:
        pytest.fail(
            f"the stack in {local_stack.layout.home} is not a Citus stack: run this suite "
            "with make test-citus (HANDOFF_HOME of a home started with --citus 2)",
            pytrace=False,
        )
    return local_stack.citus


@pytest.fixture
def tenant_services(admin: psycopg.Connection[Any]) -> Iterator[dict[str, Credential]]:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    yield {
        "creator": add_service(admin, "creator", tenant=tenant, can_create=True),
        "review": add_service(admin, "review", tenant=tenant),
        "other": add_service(admin, "other", tenant=f"{tenant}-x", can_create=True),
    }
