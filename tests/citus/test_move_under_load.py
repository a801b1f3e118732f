"""The tenant's shards moved between workers under load (``handoff chaos --kinds move``).

The invoice pipeline runs (API, relays, consumers, executors, the sandbox
provider) while its tenant is isolated to a shard group of its own and then
moved to the other worker, online, with relays and consumers killed between;
the run proves its verdict from outside (every receipt stored, one charge per
paid invoice, versions gapless, every document's versions in order on the
topic, the audit clean) and exits 1 on any breach. The seed is drawn anew each
time and printed, so a failure can be run again.
"""

from __future__ import annotations

import random

from handoff.stack.local import LocalStack
from tests.fix_cluster import run_chaos


def test_moving_the_tenant_under_load_loses_and_doubles_nothing(local_stack: LocalStack) -> None:
    seed = random.randrange(1, 10_000)
    # Six faults over the run, "move" named twice: two moves at least (the first
    # isolates the tenant, the next moves it), a relay and a consumer killed too.
    figures, said = run_chaos(local_stack.layout.home, seed, "--for", "50", "--every", "8",
                              "--rate", "5", "--kinds", "move,relay,consumer,move",
                              "--drain-timeout", "240")  # fmt: skip
    kinds = [m["kind"] for m in figures["moves"]]
    assert kinds[:1] == ["isolate"] and "move" in kinds, said
    # Creates wait on the moving shards' locks rather than fail: no create was
    # refused (a 5xx or no answer) for longer than the longest move took.
    assert figures["longestRefusalSeconds"] <= max(m["seconds"] for m in figures["moves"]), said
