"""Helpers of the Citus suite (tests/citus): a statement on one node of the cluster."""

from __future__ import annotations

from typing import Any

import psycopg


def on(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows of ``query`` on the node ``url`` names, in a session of its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()
