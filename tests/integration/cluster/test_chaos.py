"""The short chaos run (``handoff chaos``, about a minute) on the clustered stack.

Every kind of kill happens at least once (a relay, a consumer, an executor,
the API, a partition leader, the PostgreSQL primary with a failover); the
run proves its own verdict from outside and exits 1 on any breach. The
seed is drawn anew each time and printed, so a failure can be run again.
"""

from __future__ import annotations

import random

import pytest

from tests.fix_cluster import PostgresCluster, run_chaos

pytestmark = pytest.mark.slow


def test_a_minute_of_chaos_loses_nothing_and_doubles_nothing(pg_cluster: PostgresCluster) -> None:
    seed = random.randrange(1, 10_000)
    figures, said = run_chaos(pg_cluster.home, seed, "--for", "60", "--every", "9",
                              "--rate", "4", "--drain-timeout", "240")  # fmt: skip
    assert figures["failovers"] >= 1, said
    assert {"relay", "consumer", "executor", "api", "broker", "primary"} <= set(figures["kills"])
    assert figures["documents"] == 240 and figures["poison"] == 3
