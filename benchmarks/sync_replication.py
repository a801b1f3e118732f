"""What strict synchronous replication costs: emits with and without the standby's ack.

Run against a clustered stack home (``handoff stack up --pg-nodes 2``). The
same emit loads (pgbench's C client running the emit function, and the
Python emitter the product uses) run with Patroni's strict synchronous mode
on and off, alternating (on, off, off, on, ...) so that a machine that slows
during the run does not favour one side. Sync is left on at the end.
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


@dataclass
class Sample:
    synchronous: bool
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
    order = [on for r in range(rounds) for on in ((True, False) if r % 2 == 0 else (False, True))]
    try:
        for on in order:
            cluster.set_synchronous(on, superuser)
            pg = emit_pgbench.run(settings.database_url, tenant, tokens, "uniform", clients,
                                  seconds)  # fmt: skip
            py = emit.run(settings.database_url, tokens, "uniform", clients, seconds)
            samples += [Sample(on, "pgbench", pg.tps, pg.p50_ms, pg.p99_ms),
                        Sample(on, "python", py.accepted_per_s, py.p50_ms, py.p99_ms)]  # fmt: skip
            if callable(say):
                say(f"  sync {'on ' if on else 'off'}: pgbench {pg.tps:,.0f}/s p99 "
                    f"{pg.p99_ms:.1f} ms; python {py.accepted_per_s:,.0f}/s p99 "
                    f"{py.p99_ms:.1f} ms")  # fmt: skip
    finally:
        cluster.set_synchronous(True, superuser)
        remove_tenant(settings.database_url, tenant, tokens)
    return samples


def table_rows(samples: list[Sample]) -> list[list[object]]:
    """Medians per driver: with the standby, without, and the ratio."""
    rows: list[list[object]] = []
    for driver in ("pgbench", "python"):

        def median(on: bool, field: str, d: str = driver) -> float:
            return statistics.median(
                getattr(s, field) for s in samples if s.driver == d and s.synchronous == on
            )

        on_rate, off_rate = median(True, "per_s"), median(False, "per_s")
        rows.append([
            driver, f"{on_rate:,.0f}", f"{off_rate:,.0f}", f"{on_rate / off_rate:.2f}x",
            f"{median(True, 'p50_ms'):.2f} / {median(True, 'p99_ms'):.2f}",
            f"{median(False, 'p50_ms'):.2f} / {median(False, 'p99_ms'):.2f}",
        ])  # fmt: skip
    return rows
