"""The audit benchmark, short and bounded: a clean load audits clean, and it leaves
nothing behind. Its figures (time, memory) are measured by ``make bench``."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from benchmarks import audit
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack

pytestmark = pytest.mark.slow


def test_the_audit_benchmark_runs_clean_and_cleans_up(
    local_stack: LocalStack, migrated: HandoffSettings, admin: psycopg.Connection[Any]
) -> None:
    (run,) = audit.run(migrated, local_stack.layout.home, [3000], lambda _: None)
    assert run.documents == 3000 and run.breaches == 0 and run.peak_rss_mb > 0
    assert set(run.checks) == {"counts", "due-counts", "versions", "outbox", "owners"}
    left = admin.execute("SELECT count(*) FROM handoff.document_state "
                         "WHERE tenant_id LIKE 'aud-3000-%%'").fetchone()  # fmt: skip
    assert left == (0,)
