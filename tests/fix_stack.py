"""Pytest plugin: the real local stack for integration tests.

The session fixture brings the stack up itself (``up`` is idempotent, about
a second when ``make test`` already started it), so a lone ``pytest`` run
works too. A part that cannot be started fails the tests that need it;
nothing is ever skipped for a missing service.

``HANDOFF_TEST_STACK=containers`` runs the same parts as Docker containers
instead (tests/stack_containers.py); without a Docker engine that fails with a
clear message rather than skipping or quietly using the local stack.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from handoff.core.errors import StackError
from handoff.core.settings import STACK_ENV_FILE, HandoffSettings, load_settings
from handoff.stack.layout import StackSettings
from handoff.stack.local import LocalStack
from tests.stack_containers import ContainerStack

STACKS = ("local", "containers")


def point_home_at(home: Path, settings: HandoffSettings) -> None:
    """Make ``home``'s stack.env name these parts: processes started with
    ``HANDOFF_HOME=<home>`` (and ``load_settings(home)``) then use them."""
    (home / STACK_ENV_FILE).write_text(
        f"HANDOFF_DATABASE_URL={settings.database_url}\n"
        f"HANDOFF_KAFKA_BOOTSTRAP={settings.kafka_bootstrap}\n"
        f"HANDOFF_SCHEMA_REGISTRY_URL={settings.schema_registry_url}\n"
    )


def _containers(request: pytest.FixtureRequest, tmp: pytest.TempPathFactory) -> LocalStack:
    stack = ContainerStack()
    try:
        settings = stack.up()
    except StackError as exc:
        pytest.fail(str(exc), pytrace=False)
    request.addfinalizer(stack.stop)
    # Tests and the processes they start find the parts through HANDOFF_HOME's
    # stack.env, as with the local stack; that home never starts local parts.
    home = tmp.mktemp("container-stack")
    point_home_at(home, settings)
    os.environ["HANDOFF_HOME"] = str(home)
    return LocalStack(StackSettings(home=home))


@pytest.fixture(scope="session")
def local_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> LocalStack:
    kind = os.environ.get("HANDOFF_TEST_STACK", "local")
    if kind not in STACKS:
        pytest.fail(f"HANDOFF_TEST_STACK must be one of {', '.join(STACKS)}, not {kind!r}")
    if kind == "containers":
        return _containers(request, tmp_path_factory)
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
