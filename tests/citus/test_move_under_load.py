"""Shards moved between workers under load: the tenant's (``handoff chaos --kinds move``),
and every worker's when a worker is added and the shards rebalanced onto it, then drained
and removed (``--kinds rebalance``).

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

from handoff.stack.layout import Layout
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


def test_adding_a_worker_and_rebalancing_under_load_loses_and_doubles_nothing(
    local_stack: LocalStack,
) -> None:
    seed = random.randrange(1, 10_000)
    workers = len(local_stack.citus.workers) if local_stack.citus else 0
    # "rebalance" twice: a worker added and the shards spread onto it, then drained off
    # it and removed; a relay and a consumer killed too.
    figures, said = run_chaos(local_stack.layout.home, seed, "--for", "50", "--every", "10",
                              "--rate", "5", "--kinds", "rebalance,relay,consumer,rebalance",
                              "--drain-timeout", "240")  # fmt: skip
    kinds = [m["kind"] for m in figures["moves"]]
    assert kinds[:2] == ["add worker", "rebalance"] and kinds.count("drain") == 1, said
    # The run leaves the stack as it found it: the worker it added is gone again.
    assert Layout(local_stack.settings).choose_state().citus_workers == workers
    assert local_stack.citus is not None and local_stack.citus.workers_active() == workers
    # The removed worker's leftover shards were dropped before it left: a cleanup record
    # of a node that is gone would block every later move of its shard.
    assert local_stack.citus.stranded_cleanups() == 0
    moves = [m["seconds"] for m in figures["moves"] if m["kind"] in {"rebalance", "drain"}]
    assert figures["longestRefusalSeconds"] <= max(moves), said
