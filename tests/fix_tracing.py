"""Pytest plugin: a real Zipkin server (its jar from Maven Central, handoff/stack/zipkin.py)
that the tracing tests export spans to and read traces back from."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from handoff.core.errors import StackError
from handoff.stack.local import LocalStack
from handoff.stack.zipkin import ZipkinServer


@pytest.fixture(scope="session")
def zipkin(local_stack: LocalStack) -> Iterator[ZipkinServer]:
    """Zipkin's server with in-memory storage on a free port, for the whole session."""
    server = ZipkinServer(local_stack.settings.cache_dir, local_stack.layout.log_file("zipkin"))
    try:
        server.start()
    except StackError as exc:
        pytest.fail(f"Zipkin's server is not available: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
