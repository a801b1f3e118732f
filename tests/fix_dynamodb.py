"""Pytest plugin: the two stores of the emit contract, for the suite run over both.

``store`` is parametrised: PostgreSQL (the local stack's) and DynamoDB
(moto's server, started as a part of the local stack: a real HTTP process
that boto3 reaches as it would AWS; one table per test session).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from handoff.core.settings import HandoffSettings
from handoff.core.store import PostgresStore, Store
from handoff.stack.local import LocalStack

STORES = ("postgres", "dynamodb")


@pytest.fixture(scope="session")
def dynamo_url(local_stack: LocalStack) -> str:
    local_stack.up(["dynamodb"])
    return local_stack.dynamodb.url()


@pytest.fixture(scope="session")
def dynamo_store(dynamo_url: str) -> Any:
    from handoff.dynamo.store import DynamoStore
    from handoff.stack.dynamodb import client

    found = DynamoStore(client(dynamo_url), table=f"handoff-{uuid.uuid4().hex[:8]}")
    found.create_table()
    return found


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, migrated: HandoffSettings) -> Iterator[Store]:
    if request.param == "dynamodb":
        yield request.getfixturevalue("dynamo_store")
        return
    found = PostgresStore(migrated.database_url)
    try:
        yield found
    finally:
        found.close()
