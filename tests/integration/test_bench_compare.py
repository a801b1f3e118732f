"""The comparison benchmark, short and bounded: every row labelled measured or modelled
with a source, and nothing left behind. Its figures come from ``handoff bench compare``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from benchmarks import compare
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack

pytestmark = pytest.mark.slow


def test_the_comparison_labels_every_figure_and_cleans_up(
    local_stack: LocalStack, migrated: HandoffSettings, admin: psycopg.Connection[Any]
) -> None:
    said: list[str] = []
    # In a thread of its own: the tracker's reads call asyncio.run, and after the browser
    # tests this thread may already have an event loop.
    with ThreadPoolExecutor(1) as pool:
        table, raw = pool.submit(compare.run, migrated, local_stack.layout.home, 2000, 2.0, 20,
                                 said.append).result()  # fmt: skip
    rows = [line for line in table.splitlines()[:12] if line.startswith("| ") and "[" in line]
    assert len(rows) == 8, table
    for row in rows:
        assert "measured, this machine" in row and "modelled" in row and "[" in row, row
    assert "Sources of the modelled figures" in table and "$0.625" in table
    assert raw["measured"]["emit_pgbench"]["uniform"]["per_s"] > 0
    assert raw["measured"]["reads"]["counts"]["p99_ms"] > 0
    left = admin.execute(
        "SELECT (SELECT count(*) FROM handoff.document_state WHERE tenant_id LIKE 'cmp-%%' "
        "OR tenant_id LIKE 'trk-2000-%%'), (SELECT count(*) FROM handoff.services "
        "WHERE tenant_id LIKE 'cmp-%%')").fetchone()  # fmt: skip
    assert left == (0, 0)
