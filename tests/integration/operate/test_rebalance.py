"""``handoff db rebalance`` on one PostgreSQL server: a clear refusal, not a Citus error.

On Citus it runs in ``make test-citus`` (tests/citus: balanced already, and a worker
added and rebalanced under load by ``handoff chaos --kinds rebalance``).
"""

from __future__ import annotations

import os
import subprocess
import sys

from handoff.core.settings import HandoffSettings


def test_a_rebalance_on_one_server_says_there_are_no_shards(migrated: HandoffSettings) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "db", "rebalance"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "one PostgreSQL server: there are no shards to rebalance" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
