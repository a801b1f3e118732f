"""One PostgreSQL beside Citus (a coordinator and two workers), same run, same machine.

What an emit and a consumer's one-event unit cost when the tables are spread by tenant:

- emit, Python driver: the product's own call (``emit_as``: the API's emit naming the
  credential's tenant, learned once), which Citus hands whole to the tenant's worker;
- emit, pgbench driver: the emit function called in a join with the services table (the
  credential looked up in the same statement), a form Citus cannot hand over, so each
  of the emit's statements is routed to the worker one by one;
- the consumer's guarded unit of one event (benchmarks/consumer.py's pgbench script, as
  the runtime sends it: the guard naming the tenant, then the service's own INSERT): an
  explicit transaction whose Handoff call Citus hands to the tenant's worker inside it,
  beside the INSERT on the same connection.

For each, the statements the coordinator sent to a worker per call (Citus's own counters,
``citus_stat_counters``, over a sample of calls outside the timed runs) and whether any
call committed on two nodes (``pg_dist_transaction``). On one machine this is what the
coordinator and distribution add: a cost figure, not a scaling figure (every node shares
the same cores).

Everything created is removed afterwards from both databases: rows, services, roles.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb
from rich.console import Console

from benchmarks import emit, emit_pgbench, pgbench
from benchmarks.consumer import GUARDED
from benchmarks.consumer_app import EFFECTS_DDL
from benchmarks.tenants import remove_tenant
from handoff.core.emitter import emit_as
from handoff.core.identity import Credential
from handoff.core.models import CreateRequest, HandoffRequest
from handoff.core.services import add_service
from handoff.core.settings import load_settings
from handoff.stack.layout import StackSettings
from handoff.stack.local import LocalStack

SAMPLE = 200  # calls per kind for the round-trip counts
Call = Callable[[], None]
SENT = """
SELECT coalesce(sum(query_execution_single_shard + query_execution_multi_shard), 0)::bigint
  FROM citus_stat_counters WHERE name = current_database()
"""
TWO_PHASE = "SELECT count(*) FROM pg_dist_transaction"
# The benchmark's effect table beside the tenant's guard rows, as a consumer's own tables
# are on Citus: distributed by tenant, co-located (docs/scaling.md).
DISTRIBUTE_EFFECTS = """
SELECT create_distributed_table('handoff_bench.effects', 'tenant_id',
                                colocate_with => 'handoff.document_state')
 WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition
                    WHERE logicalrelid = 'handoff_bench.effects'::regclass)
"""
# The guarded unit as the runtime sends it on Citus: the guard names the tenant, and its
# arguments are constants (no random() inside: a forced call is handed over only then).
GUARDED_FOR = "\\set e random(1, 1000000000000)\n" + GUARDED.replace(
    "handoff.consumer_begin(", "handoff.consumer_begin_for(:tenant, "
).replace("md5(random()::text)", "'e-' || :e")
assert "consumer_begin_for" in GUARDED_FOR and "random()" not in GUARDED_FOR

# The pgbench driver's statement (emit_pgbench.SCRIPT), for the round-trip sample.
ROUTED_EMIT = """
SELECT r FROM handoff.services s
 CROSS JOIN LATERAL handoff.emit_http(
        s.db_role, s.secret_hash, 'handoff', gen_random_uuid()::text, 'handoff',
        %(document)s, NULL, NULL, %(next)s, 'working', %(version)s, NULL, NULL, NULL, NULL) AS r
 WHERE s.tenant_id = %(tenant)s AND s.name = %(owner)s
"""


@dataclass
class Side:
    """One database of the comparison: its stack, settings and superuser."""

    name: str
    stack: LocalStack
    database_url: str
    superuser: str
    citus: bool


@dataclass
class Row:
    measure: str
    clients: int
    one: pgbench.PgbenchResult
    citus: pgbench.PgbenchResult
    sent_per_call: float
    delegated: str
    two_phase: float  # share of calls committed with two-phase commit


def _side(home: Path | None, name: str, console: Console) -> Side:
    stack = LocalStack(StackSettings(home=home) if home else None, console=console)
    settings = load_settings(stack.layout.home)
    database = str(conninfo_to_dict(settings.database_url)["dbname"])
    return Side(name, stack, settings.database_url, stack.postgres.superuser_url(database),
                stack.citus is not None)  # fmt: skip


def ensure_citus_stack(home: Path, console: Console) -> bool:
    """Start the Citus stack in ``home`` if it is not running; True if this started it."""
    stack = LocalStack(StackSettings(home=home), console=console)
    if stack.citus is not None and stack.postgres.pid() is not None:
        return False
    env = {**os.environ, "HANDOFF_HOME": str(home)}
    console.print(f"[bold]citus[/bold]: starting a coordinator and 2 workers in {home}…")
    for args in (["stack", "up", "--citus", "2"], ["db", "upgrade"]):
        done = subprocess.run([sys.executable, "-m", "handoff.cli", *args], env=env, check=False)
        if done.returncode:
            raise SystemExit(
                f"could not start the Citus stack in {home} (handoff {' '.join(args)} failed); "
                "Citus needs HANDOFF_STACK_CITUS_SOURCE or an installed citus: docs/scaling.md"
            )
    return True


def stop_stack(home: Path) -> None:
    env = {**os.environ, "HANDOFF_HOME": str(home)}
    subprocess.run([sys.executable, "-m", "handoff.cli", "stack", "down"], env=env, check=False)


def _count(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


class Tenant:
    """A tenant of the benchmark's own on one side: 50 owners and the guarded unit's
    service, removed with everything they wrote."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self.name = f"citus-bench-{uuid.uuid4().hex[:8]}"
        self.tokens = emit.register_owners(side.database_url, self.name)
        with psycopg.connect(side.database_url, autocommit=True) as conn:
            for statement in filter(str.strip, EFFECTS_DDL.split(";")):
                conn.execute(statement)  # one by one: Citus sends each DDL on to the workers
            if side.citus:
                conn.execute(DISTRIBUTE_EFFECTS)
            self.unit = add_service(conn, "bench-pg", tenant=self.name)
        self._closing: list[psycopg.Connection[Any]] = []

    def clean(self) -> None:
        for conn in self._closing:
            conn.close()
        remove_tenant(self.side.database_url, self.name, [*self.tokens, "bench-pg"],
                      extra=["handoff_bench.effects"])  # fmt: skip

    def as_unit_service(self) -> str:
        return make_conninfo(self.side.database_url, user=self.unit.role, password=self.unit.secret)

    # -- the three calls, timed --------------------------------------------------------

    def emit_python(self, clients: int, seconds: float) -> pgbench.PgbenchResult:
        got = emit.run(self.side.database_url, self.tokens, "uniform", clients, seconds)
        if got.errors:
            raise SystemExit(f"{got.errors} emits failed on {self.side.name}")
        return pgbench.PgbenchResult(clients, got.accepted_per_s, got.p50_ms, got.p99_ms)

    def emit_pgbench(self, clients: int, seconds: float) -> pgbench.PgbenchResult:
        return emit_pgbench.run(self.side.database_url, self.name, self.tokens, "uniform",
                                clients, int(seconds))  # fmt: skip

    def guarded_unit(self, clients: int, seconds: float) -> pgbench.PgbenchResult:
        return pgbench.run_text(self.as_unit_service(), GUARDED_FOR.format(documents=100_000),
                                clients, int(seconds), {"tenant": self.name})  # fmt: skip

    # -- the same calls, counted -------------------------------------------------------

    def sent_per_call(self, kind: str) -> tuple[float, float]:
        """Statements the coordinator sent to workers per call of ``kind``, and the share
        of calls that committed with two-phase commit, over SAMPLE calls (one client,
        nothing else running)."""
        with (
            psycopg.connect(self.side.database_url, autocommit=True) as conn,
            psycopg.connect(self.side.superuser, autocommit=True) as admin,
        ):
            calls = getattr(self, f"_sample_{kind}")(conn)

            def count(query: str) -> int:
                row = admin.execute(query).fetchone()
                return int(row[0]) if row else 0

            sent, two_phase, seen = count(SENT), 0, 0
            for call in calls:
                before = count(TWO_PHASE)
                call()
                after = count(TWO_PHASE)
                # Citus's recovery deletes the records of finished two-phase commits now
                # and then (citus.recover_2pc_interval): a call it overlapped is not counted.
                if after >= before:
                    seen += 1
                    two_phase += after > before
            sent = count(SENT) - sent
        return sent / len(calls), two_phase / max(seen, 1)

    def _documents(self, conn: psycopg.Connection[Any]) -> list[str]:
        creator = Credential.parse(self.tokens["o01"])
        docs = [f"sample-{uuid.uuid4().hex[:6]}-{n}" for n in range(SAMPLE)]
        for doc in docs:
            emit_as(conn, creator, CreateRequest(event_id=str(uuid.uuid4()), document_id=doc,
                                                 owner="o01", status="new"))  # fmt: skip
        return docs

    def _sample_delegated(self, conn: psycopg.Connection[Any]) -> list[Call]:
        creator = Credential.parse(self.tokens["o01"])

        def hand_on(doc: str) -> None:
            emit_as(conn, creator, HandoffRequest(
                event_id=str(uuid.uuid4()), event_type="handoff", document_id=doc,
                next_owner="o02", status="working", expected_version=1))  # fmt: skip

        return [partial(hand_on, doc) for doc in self._documents(conn)]

    def _sample_routed(self, conn: psycopg.Connection[Any]) -> list[Call]:
        def hand_on(doc: str) -> None:
            conn.execute(ROUTED_EMIT, {"document": doc, "next": "o02", "version": 1,
                                       "tenant": self.name, "owner": "o01"})  # fmt: skip

        return [partial(hand_on, doc) for doc in self._documents(conn)]

    def _sample_unit(self, _: psycopg.Connection[Any]) -> list[Call]:
        unit_conn = psycopg.connect(self.as_unit_service())
        self._closing.append(unit_conn)

        def unit(n: int) -> None:
            with unit_conn.transaction():
                event = {"eventId": str(uuid.uuid4()), "fingerprint": "00",
                         "documentId": f"u-{n}", "runId": 1, "version": 1}  # fmt: skip
                unit_conn.execute(
                    "SELECT verdict FROM handoff.consumer_begin_for(%s, %s, ARRAY['created'],"
                    " NULL, false)",
                    (self.name, Jsonb([event])),
                )
                unit_conn.execute(
                    "INSERT INTO handoff_bench.effects (tenant_id, consumer, event_id,"
                    " occurred_at) VALUES (%s, 'bench-pg', %s, now())",
                    (self.name, str(n)),
                )

        return [partial(unit, n) for n in range(SAMPLE)]


# (measure, its timed driver, its counted sample, delegated?, client counts: None = --clients)
MEASURES = (
    ("emit, Python driver", "emit_python", "delegated", "yes", None),
    ("emit, pgbench driver", "emit_pgbench", "routed", "no (a join)", None),
    ("consumer unit, batch 1", "guarded_unit", "unit", "yes, inside it", (1, 8)),
)


def run(client_counts: list[int], seconds: float, citus_home: Path, console: Console) -> list[Row]:
    """Every measure on one PostgreSQL (the default stack home) and on Citus, side by side."""
    started = ensure_citus_stack(citus_home, console)
    sides = [_side(None, "one PostgreSQL", console), _side(citus_home, "Citus 1+2", console)]
    if sides[0].citus or not sides[1].citus:
        raise SystemExit(
            f"bench citus compares the default stack home (one PostgreSQL) with a Citus home "
            f"({citus_home}); the default home is a Citus stack or {citus_home} is not"
        )
    tenants = [Tenant(side) for side in sides]
    rows: list[Row] = []
    try:
        for measure, timed, counted, delegated, counts in MEASURES:
            sent, two_phase = tenants[1].sent_per_call(counted)
            for clients in counts or client_counts:
                got = []
                for tenant in tenants:
                    console.print(f"  {measure}, {clients} clients, {tenant.side.name}…")
                    got.append(getattr(tenant, timed)(clients, seconds))
                rows.append(Row(measure, clients, got[0], got[1], sent, delegated, two_phase))
    finally:
        console.print("  removing what the benchmark created…")
        for tenant in tenants:
            tenant.clean()
        if started:
            stop_stack(citus_home)
    return rows
