"""Helpers of the Citus suite (tests/citus): a statement on one node of the cluster; and
whether this run is on Citus (make test-citus), for the shared suites' few differences."""

from __future__ import annotations

import os
from typing import Any

import psycopg

ON_CITUS = os.environ.get("HANDOFF_TEST_CITUS") == "1"


def on(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows of ``query`` on the node ``url`` names, in a session of its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()
