"""Pytest plugin: the real local stack for integration tests.

The session fixture brings the stack up itself (``up`` is idempotent, about
a second when ``make test`` already started it), so a lone ``pytest`` run
works too. A part that cannot be started fails the tests that need it;
nothing is ever skipped for a missing service.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from handoff.core.errors import StackError
from handoff.core.settings import HandoffSettings, load_settings
from handoff.stack.local import LocalStack


@pytest.fixture(scope="session")
def local_stack() -> LocalStack:
    stack = LocalStack()
    try:
        stack.up()
    except StackError as exc:
        pytest.fail(f"the local stack did not come up: {exc}", pytrace=False)
    return stack


@pytest.fixture(scope="session")
def settings(local_stack: LocalStack) -> HandoffSettings:
    return load_settings(local_stack.layout.home)


@pytest.fixture
def pg(settings: HandoffSettings) -> Iterator[psycopg.Connection]:
    with psycopg.connect(settings.database_url) as conn:
        yield conn
