"""The kills of a chaos run: processes, a partition leader, the PostgreSQL primary.

Processes are SIGKILLed (their whole process group, as a machine's OOM killer
or a lost container would end them) and the supervisor starts them again. A
broker is SIGKILLed and started again after a pause. The primary is SIGKILLed
with its Patroni; once a standby is promoted, the old primary is started
again and rejoins as a standby (with strict synchronous replication the new
primary takes writes once it has a standby, so the rejoin is part of the
recovery, not an extra).

On Citus, a move: the run's tenant is first isolated to a shard of its own
(``isolate_tenant_to_new_shard``: a split of its shard group), then each
later move takes that shard group to another worker
(``citus_move_shard_placement``), both online (logical replication; writes
to the moving shards wait only for the final switch). Emits, the relay,
consumers and executors run throughout; the verdict is the same.

A rebalance grows the Citus stack by a worker (started and joined as
``handoff stack up --citus N+1`` does), then rebalances as ``handoff db
rebalance`` does (Citus's background job, shard groups moved online). The
next rebalance, or the end of the run, drains that worker's shards onto the
others and removes it (``handoff stack up --citus N``), so a run leaves the
stack as it found it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from handoff.chaos import faults_sql as q
from handoff.chaos.plan import Kill
from handoff.core.errors import StackError
from handoff.core.kafka import admin
from handoff.core.settings import HandoffSettings
from handoff.deploy.supervisor import Child, Supervisor
from handoff.operate.rebalance import rebalance
from handoff.stack.local import LocalStack
from handoff.stack.migrate import upgrade
from handoff.stack.postgres import APP_DB

log = logging.getLogger("handoff.chaos")

# Which supervised processes each kind of kill picks from.
PROCESSES = {
    "relay": ("relay",),
    "consumer": ("routing", "review", "finalization"),
    "executor": ("executor",),
    "api": ("api",),
}
BROKER_DOWN_S = 8.0  # how long a killed broker stays down


@dataclass
class FaultFigures:
    kills: Counter[str] = field(default_factory=Counter)
    failovers: int = 0
    failover_s: list[float] = field(default_factory=list)  # crash -> a standby leads
    last_fault_at: float = 0.0  # monotonic; when the last fault ended
    # ("isolate" | "move" | "add worker" | "rebalance" | "drain", seconds)
    moves: list[tuple[str, float]] = field(default_factory=list)


class Killer:
    def __init__(
        self, supervisor: Supervisor, stack: LocalStack, topic: str, seed: int,
        say: Callable[[str], None], tenant: str = "", settings: HandoffSettings | None = None,
    ) -> None:  # fmt: skip
        self.supervisor, self.stack, self.topic, self.tenant = supervisor, stack, topic, tenant
        self.settings = settings
        self.added_worker = False  # a rebalance grew the Citus stack; drained at the end
        self.rng = random.Random(seed ^ 0x5EED)
        self.say = say
        self.figures = FaultFigures()

    def _note(self, line: str) -> None:
        log.info("%s", line)
        self.say(f"  {line}")

    def apply(self, kill: Kill) -> None:
        if kill.kind in PROCESSES:
            self._kill_process(kill.kind)
        elif kill.kind == "broker":
            self._kill_broker()
        elif kill.kind == "primary":
            self._kill_primary()
        elif kill.kind == "move":
            self._move_tenant()
        elif kill.kind == "rebalance":
            self._rebalance()
        self.figures.kills[kill.kind] += 1
        self.figures.last_fault_at = time.monotonic()

    def _kill_process(self, kind: str) -> None:
        running = [
            child for child in self.supervisor.children
            if child.spec.name in PROCESSES[kind] and child.proc is not None
        ]  # fmt: skip
        if not running:
            self._note(f"kill {kind}: none running now (all restarting); skipped")
            return
        child: Child = self.rng.choice(running)
        proc = child.proc
        assert proc is not None
        with contextlib.suppress(ProcessLookupError):  # it died on its own just now
            os.killpg(proc.pid, signal.SIGKILL)
        self._note(f"killed {child.label} (pid {proc.pid}, SIGKILL)")

    def _kill_broker(self) -> None:
        if len(self.stack.brokers) < 3:
            raise StackError("a broker kill needs three brokers (handoff stack up --brokers 3)")
        bootstrap = self.stack.bootstrap_servers()
        meta = admin(bootstrap).list_topics(self.topic, timeout=10)
        partition = self.rng.choice(list(meta.topics[self.topic].partitions.values()))
        victim = self.stack.brokers[partition.leader - 1]
        pid = victim.pid()
        if pid is None:
            self._note(f"kill broker: {victim.name} is not running; skipped")
            return
        os.kill(pid, signal.SIGKILL)
        self._note(f"killed {victim.name}, leader of {self.topic}/{partition.id} (SIGKILL)")
        time.sleep(BROKER_DOWN_S)
        self.stack.up([victim.name])
        self._note(f"{victim.name} started again")

    def _kill_primary(self) -> None:
        cluster = self.stack.cluster
        if cluster is None:
            raise StackError(
                "a primary kill needs a PostgreSQL cluster (handoff stack up --pg-nodes 2)"
            )
        lost_name = cluster.leader()
        if lost_name is None:
            self._note("kill primary: no primary now (an election is under way); skipped")
            return
        lost = cluster.node(lost_name)
        began = time.monotonic()
        lost.crash()
        self._note(f"killed the primary {lost.name} (Patroni and PostgreSQL, SIGKILL)")
        promoted = cluster.wait_new_leader(lost.name, 120)
        took = time.monotonic() - began
        self.figures.failovers += 1
        self.figures.failover_s.append(took)
        self._note(f"{promoted} promoted {took:.1f} s after the loss; {lost.name} rejoins")
        self.stack.up([lost.name])

    def _move_tenant(self) -> None:
        citus = self.stack.citus
        if citus is None:
            raise StackError("a move needs a Citus stack (handoff stack up --citus 2)")
        with psycopg.connect(citus.coordinator.node_url(APP_DB), autocommit=True) as conn:
            isolated = not any(what == "isolate" for what, _ in self.figures.moves)
            began = time.monotonic()
            if isolated:
                conn.execute(q.ISOLATE, {"tenant": self.tenant})
            else:
                row = conn.execute(q.PLACEMENT, {"tenant": self.tenant}).fetchone()
                assert row is not None  # the tenant's shard is always placed somewhere
                shard, host, port = row
                targets = conn.execute(q.OTHER_WORKERS, {"host": host, "port": port}).fetchall()
                to_host, to_port = self.rng.choice(targets)
                conn.execute(q.MOVE, (shard, host, port, to_host, to_port))
            took = time.monotonic() - began
        self.figures.moves.append(("isolate" if isolated else "move", took))
        done = "isolated to a shard of its own" if isolated else f"moved to port {to_port}"
        self._note(f"tenant {self.tenant} {done} in {took:.1f} s")

    def _rebalance(self) -> None:
        citus = self.stack.citus
        if citus is None or self.settings is None:
            raise StackError("a rebalance needs a Citus stack (handoff stack up --citus 2)")
        if self.added_worker:
            self._remove_worker()
            return
        before = self._tenant_port()
        began = time.monotonic()
        self.added_worker = True  # from here on, restore() takes it out again
        self._resize(len(citus.workers) + 1)
        joined = time.monotonic() - began
        upgrade(self.settings)  # the new worker's per-node parts (as db rebalance does)
        done = rebalance(self.settings)
        self.figures.moves += [("add worker", joined), ("rebalance", done.seconds)]
        after = self._tenant_port()
        moved = f"from port {before} to {after}" if after != before else f"not (on port {after})"
        self._note(f"a worker joined in {joined:.1f} s; the rebalance moved {done.moves} shard "
                   f"group(s) in {done.seconds:.1f} s; the tenant's moved {moved}")  # fmt: skip

    def restore(self) -> None:
        """The Citus stack as the run found it: a worker a rebalance added is removed."""
        if self.added_worker:
            self._remove_worker()

    def _remove_worker(self) -> None:
        assert self.stack.citus is not None
        began = time.monotonic()
        self._resize(len(self.stack.citus.workers) - 1)
        took = time.monotonic() - began
        self.added_worker = False
        self.figures.moves.append(("drain", took))
        self._note(f"the added worker drained (its shards moved back) and removed in {took:.1f} s")

    def _resize(self, workers: int) -> None:
        """The stack with ``workers`` Citus workers: started and joined, or drained and
        removed (stack/local.py), as ``handoff stack up --citus N`` does."""
        settings = self.stack.settings.model_copy(update={"citus": workers})
        self.stack = LocalStack(settings, console=self.stack.console)
        self.stack.up([part.name for part in self.stack.database_parts])

    def _tenant_port(self) -> int:
        assert self.stack.citus is not None
        with psycopg.connect(self.stack.citus.coordinator.node_url(APP_DB), autocommit=True) as c:
            row = c.execute(q.PLACEMENT, {"tenant": self.tenant}).fetchone()
        assert row is not None  # the tenant's shard is always placed somewhere
        return int(row[2])
