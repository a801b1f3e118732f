"""What strict synchronous replication costs: emits with the standby's ack, without it,
and with no standby at all.

Run against a clustered stack home (``handoff stack up --pg-nodes 2``). The
same emit loads (pgbench's C client running the emit function, and the
Python emitter the product uses) run in three modes: ``sync`` (Patroni's
strict synchronous mode, as the stack runs), ``async`` (the standby streams
but no commit waits for it) and ``alone`` (the standby stopped: one server,
as before the cluster). The order turns round every round so that a machine
that slows during the run does not favour one mode. The cluster is left as
it was found: both nodes up, strict synchronous mode on.
"""

from __future__ import annotations

import statistics
import uuid
from dataclasses import dataclass

from benchmarks import emit, emit_pgbench
from benchmarks.tenants import remove_tenant
from handoff.core.errors import StackError
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until

MODES = ("sync", "async", "alone")


@dataclass
class Sample:
    mode: str
    driver: str
    per_s: float
    p50_ms: float
    p99_ms: float


def run(
    stack: LocalStack, settings: HandoffSettings, clients: int, seconds: int, rounds: int,
    say: object = print,
) -> list[Sample]:  # fmt: skip
    cluster = stack.cluster
    if cluster is None:
        raise StackError(
            "this benchmark needs a PostgreSQL cluster: HANDOFF_HOME=<new folder> "
            "handoff stack up --pg-nodes 2, then handoff db upgrade"
        )
    superuser = stack.postgres.superuser_url()
    tenant = f"bench-sync-{uuid.uuid4().hex[:8]}"
    tokens = emit.register_owners(settings.database_url, tenant)
    samples: list[Sample] = []
    order = [m for r in range(rounds) for m in (MODES if r % 2 == 0 else MODES[::-1])]
    try:
        for mode in order:
            _enter(stack, mode, superuser)
            pg = emit_pgbench.run(settings.database_url, tenant, tokens, "uniform", clients,
                                  seconds)  # fmt: skip
            py = emit.run(settings.database_url, tokens, "uniform", clients, seconds)
            samples.append(Sample(mode, "pgbench", pg.tps, pg.p50_ms, pg.p99_ms))
            samples.append(Sample(mode, "python", py.accepted_per_s, py.p50_ms, py.p99_ms))
            if callable(say):
                say(f"  {mode:>5}: pgbench {pg.tps:,.0f}/s p99 {pg.p99_ms:.1f} ms; "
                    f"python {py.accepted_per_s:,.0f}/s p99 {py.p99_ms:.1f} ms")  # fmt: skip
    finally:
        _enter(stack, "sync", superuser)
        remove_tenant(settings.database_url, tenant, tokens)
    return samples


def _standbys(stack: LocalStack) -> list[str]:
    assert stack.cluster is not None
    return [m.name for m in stack.cluster.members() if m.role != "leader"]


def _enter(stack: LocalStack, mode: str, superuser: str) -> None:
    """Put the cluster in ``mode``: every node up for sync and async, standbys down alone."""
    cluster = stack.cluster
    assert cluster is not None
    if mode == "alone":
        cluster.set_synchronous(False, superuser)  # strict mode would stop writes
        stack.down(_standbys(stack))
        return
    stopped = [node.name for node in cluster.nodes if node.pid() is None]
    if stopped:
        stack.up(stopped)

        def streaming() -> bool:
            members = cluster.members()
            followers = [m for m in members if m.role != "leader"]
            return len(members) == len(cluster.nodes) and all(
                m.state == "streaming" for m in followers
            )

        if not wait_until(streaming, 120, 0.5):
            raise StackError("a standby did not stream again within 120 s")
    cluster.set_synchronous(mode == "sync", superuser)


def table_rows(samples: list[Sample]) -> list[list[object]]:
    """Medians per driver and mode, with each mode's rate against the lone server's."""
    rows: list[list[object]] = []
    for driver in ("pgbench", "python"):

        def median(mode: str, field: str, d: str = driver) -> float:
            return statistics.median(
                float(getattr(s, field)) for s in samples if s.driver == d and s.mode == mode
            )

        alone = median("alone", "per_s")
        for mode in MODES:
            rate = median(mode, "per_s")
            latency = f"{median(mode, 'p50_ms'):.2f} / {median(mode, 'p99_ms'):.2f}"
            rows.append([driver, mode, f"{rate:,.0f}", f"{rate / alone:.2f}x", latency])
    return rows
