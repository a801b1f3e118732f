"""The short chaos run (``handoff chaos``, about a minute) on the clustered stack.

Every kind of kill happens at least once (a relay, a consumer, an executor,
the API, a partition leader, the PostgreSQL primary with a failover); the
run proves its own verdict from outside and exits 1 on any breach. The
seed is drawn anew each time and printed, so a failure can be run again.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from tests.fix_cluster import PostgresCluster

pytestmark = pytest.mark.slow


def test_a_minute_of_chaos_loses_nothing_and_doubles_nothing(pg_cluster: PostgresCluster) -> None:
    seed = random.randrange(1, 10_000)
    args = ["chaos", "--for", "60", "--every", "9", "--rate", "4", "--seed", str(seed),
            "--drain-timeout", "240", "--json"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", *args],
        env={**os.environ, "HANDOFF_HOME": str(pg_cluster.home), "COLUMNS": "120"},
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    said = f"seed {seed}, exit {done.returncode}:\n{done.stderr[-6000:]}"
    assert done.stdout.strip(), said
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"chaos seed {seed}: {figures}")
    assert done.returncode == 0 and figures["ok"], said
    assert figures["lost"] == 0 and figures["doubled"] == 0, said
    assert figures["failovers"] >= 1, said
    assert {"relay", "consumer", "executor", "api", "broker", "primary"} <= set(figures["kills"])
    assert figures["documents"] == 240 and figures["poison"] == 3
