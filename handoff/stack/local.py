"""The local stack as a whole: PostgreSQL, Kafka and the registry without Docker.

``up`` is idempotent: parts already running for this home are reused, the
rest are started. PostgreSQL comes first because the registry stores its
schemas there; Kafka and the registry then start side by side, since each
JVM takes seconds and the machine has cores to spare for both.

With ``pg_nodes`` above 1, PostgreSQL is a Patroni cluster: ZooKeeper (its
store) starts first, then every node at once (the first to take the leader
lock initialises the database, the others copy it and follow). With
``citus_workers``, PostgreSQL is a Citus coordinator and its workers
(stack/citus.py), started together and joined before the roles are made. A
Citus home started again with more workers starts and joins the new ones
(empty until a rebalance: ``handoff db rebalance``); with fewer, ``up``
drains the last workers' shards onto the others, removes them from the
cluster, and deletes their data.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

from handoff.core.errors import StackError
from handoff.stack.citus import CitusCluster, CitusNode
from handoff.stack.citus_build import citus_bin
from handoff.stack.dynamodb import DynamoDB
from handoff.stack.kafka import Kafka
from handoff.stack.layout import Layout, StackSettings, port_is_free
from handoff.stack.part import Part, PartStatus
from handoff.stack.patroni import Cluster, PatroniNode
from handoff.stack.postgres import Postgres
from handoff.stack.registry import Registry
from handoff.stack.zookeeper import ZooKeeper

# Started on request only (handoff stack up --with dynamodb): the AWS twin's store.
OPTIONAL_PARTS = ("dynamodb",)


class LocalStack:
    def __init__(self, settings: StackSettings | None = None, console: Console | None = None):
        self.settings = settings or StackSettings()
        self.console = console or Console(stderr=True)
        self.layout = Layout(self.settings)
        self.state = self.layout.choose_state()
        self.zookeeper: ZooKeeper | None = None
        self.cluster: Cluster | None = None
        self.citus: CitusCluster | None = None
        self.citus_leaving: list[CitusNode] = []  # workers ``up`` drains and removes
        if self.state.citus_workers:
            self.pg_nodes: list[Postgres] = self._citus_nodes()
        elif self.state.pg_nodes == 1:
            self.pg_nodes = [Postgres(self.layout, self.state, self.console)]
        else:
            self.zookeeper = ZooKeeper(self.layout, self.state, self.console)
            members = [
                PatroniNode(self.layout, self.state, self.console, node)
                for node in range(1, self.state.pg_nodes + 1)
            ]
            self.cluster = Cluster(members)
            self.pg_nodes = list(members)
        self.postgres = self.pg_nodes[0]
        self.brokers = [
            Kafka(self.layout, self.state, self.console, node)
            for node in range(1, self.state.brokers + 1)
        ]
        self.kafka = self.brokers[0]
        self.registry = Registry(self.layout, self.state, self.console, self.postgres)
        self.dynamodb = DynamoDB(self.layout, self.state, self.console)

    def _citus_nodes(self) -> list[Postgres]:
        # Found (or built) when a node is prepared to start, not here: stopping or
        # inspecting a Citus home needs no Citus build.
        @functools.cache
        def found() -> Path:
            return citus_bin(self.settings.citus_source, self.settings.cache_dir, self.console)

        wanted = self.settings.citus or self.state.citus_workers
        if wanted > self.state.citus_workers:  # the new ones start and join with the rest
            self.state.citus_workers = wanted
            self.layout.save_state(self.state)
        coordinator = CitusNode(self.layout, self.state, self.console, found)
        workers = [
            CitusNode(self.layout, self.state, self.console, found, worker)
            for worker in range(1, self.state.citus_workers + 1)
        ]
        # Fewer wanted: the last ones keep running (their shards must be drained
        # first) until ``up`` removes them.
        self.citus_leaving = workers[wanted:]
        self.citus = CitusCluster(coordinator, workers)
        return list(self.citus.nodes)

    def _remove_leaving_workers(self) -> None:
        """Drain each leaving worker's shards onto the others (online), take it out of the
        cluster, stop it and delete its data; the home then records fewer workers."""
        assert self.citus is not None
        for worker in reversed(self.citus_leaving):
            began = time.monotonic()
            self.console.print(f"Draining {worker.name}: moving its shards to the other workers…")
            self.citus.remove(worker)
            worker.stop()
            shutil.rmtree(self.layout.part_dir(worker.name), ignore_errors=True)
            self.state.ports.more.pop(worker.name, None)
            self.state.citus_workers -= 1
            self.layout.save_state(self.state)
            self.citus.workers.remove(worker)
            self.pg_nodes.remove(worker)
            self.console.print(f"{worker.name} removed after {time.monotonic() - began:.1f} s.")
        self.citus_leaving = []

    @property
    def database_parts(self) -> list[Part]:
        """ZooKeeper (of a cluster) and every PostgreSQL node, in starting order."""
        return [*([self.zookeeper] if self.zookeeper else []), *self.pg_nodes]

    @property
    def parts(self) -> list[Part]:
        return [*self.database_parts, *self.brokers, self.registry, self.dynamodb]

    @property
    def standing(self) -> tuple[str, ...]:
        """The parts ``up`` starts when none are named: the database, every broker, the registry."""
        return (
            *(p.name for p in self.database_parts),
            *(b.name for b in self.brokers),
            self.registry.name,
        )

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        known = ", ".join(self.standing + OPTIONAL_PARTS)
        raise StackError(f"no part named {name!r}; the parts are {known}")

    def bootstrap_servers(self) -> str:
        """Every broker's address: a client that knows one live broker finds the rest."""
        return ",".join(broker.address() for broker in self.brokers)

    # -- settings other processes read ---------------------------------------------

    def env(self) -> dict[str, str]:
        found = {
            "HANDOFF_DATABASE_URL": self.postgres.app_url(),
            "HANDOFF_KAFKA_BOOTSTRAP": self.bootstrap_servers(),
            "HANDOFF_SCHEMA_REGISTRY_URL": self.registry.url(),
        }
        if self.dynamodb.pid() is not None:
            found["HANDOFF_DYNAMODB_URL"] = self.dynamodb.url()
        return found

    def write_env(self) -> None:
        lines = [f"{key}={value}" for key, value in self.env().items()]
        self.layout.env_file.write_text("\n".join(lines) + "\n")
        self.layout.env_file.chmod(0o600)

    # -- lifecycle -------------------------------------------------------------------

    def _check_ports(self, parts: Iterable[Part]) -> None:
        p = self.state.ports
        wanted = {
            **{node.name: [node.port] for node in self.pg_nodes},
            **{node.name: [node.port, node.rest_port] for node in self._members()},
            **({"zookeeper": [self.zookeeper.port]} if self.zookeeper else {}),
            **{broker.name: list(broker.ports()) for broker in self.brokers},
            "registry": [p.registry, p.registry_management],
            "dynamodb": [int(self.dynamodb.url().rsplit(":", 1)[1])],
        }
        for part in parts:
            busy = [port for port in wanted[part.name] if not port_is_free(port)]
            if busy:
                raise StackError(
                    f"{part.name} cannot start: port(s) {busy} are used by another process. "
                    f"Stop that process, or remove {self.layout.state_file} to choose new ports."
                )

    def up(self, parts: Iterable[str] | None = None) -> list[PartStatus]:
        selected = [self.part(name) for name in (self.standing if parts is None else parts)]
        if (self.cluster or self.citus) and any(p in self.database_parts for p in selected):
            # A cluster's database starts as a whole: in strict synchronous mode a
            # primary without its standby takes no commit, so a node alone would hang
            # the role bootstrap (and every write) until the others came; a Citus
            # coordinator without its workers reaches none of its shards.
            selected = [*self.database_parts,
                        *(p for p in selected if p not in self.database_parts)]  # fmt: skip
        self.layout.ensure_dirs()
        began = time.monotonic()
        for part in selected:
            part.prepare()
        to_start = [part for part in selected if part.needs_start()]
        self._check_ports(to_start)
        database = [part for part in self.database_parts if part in selected]
        for part in database:
            if part in to_start:
                self.console.print(f"Starting {part.name}…")
                part.start()
            if part is self.zookeeper:  # Patroni needs its store from the first moment
                part.wait_healthy(self.settings.start_timeout_s)
        for part in database:
            part.wait_healthy(self.settings.start_timeout_s)
        if self.postgres in selected:
            if self.cluster is not None:
                self.console.print("Waiting for a primary…")
                url, timeout = self.postgres.superuser_url(), self.settings.start_timeout_s
                self.cluster.wait_writable(url, timeout)
            if self.citus is not None:
                self.citus.bootstrap()
                if self.citus_leaving:
                    self._remove_leaving_workers()
                    selected = [part for part in selected if part in self.parts]
            else:
                self.postgres.bootstrap()
        jvms = [part for part in to_start if part not in database]
        for part in jvms:
            self.console.print(f"Starting {part.name}…")
            part.start()
        # From the JVMs' start, not the call's: a first start builds Citus and downloads
        # jars before this (seen: 110 s of a 120 s budget gone, Kafka given 5 s).
        deadline = time.monotonic() + self.settings.start_timeout_s
        for part in selected:
            part.wait_healthy(max(1.0, deadline - time.monotonic()))
        self.write_env()
        self.console.print(f"Stack healthy after {time.monotonic() - began:.1f} s.")
        return self.status()

    def down(self, parts: Iterable[str] | None = None) -> list[str]:
        """Stop this home's running parts, dependants first; return the names stopped."""
        names = (*self.standing, *OPTIONAL_PARTS) if parts is None else parts
        running = [part for part in reversed([self.part(n) for n in names]) if part.pid()]
        # The brokers stop together. Each is also a controller, and one by one the
        # last broker standing has lost its quorum: its controlled shutdown waits for
        # a controller that is gone until stop's timeout kills it (45 s). Signalled
        # together they have their quorum while they shut down (about 7 s for three).
        brokers = [part for part in running if isinstance(part, Kafka)]
        for part in running:
            if not isinstance(part, Kafka):
                self.console.print(f"Stopping {part.name}…")
                part.stop()
            elif part is brokers[0]:  # the first broker in the order stands for them all
                self.console.print(f"Stopping {', '.join(b.name for b in brokers)}…")
                with ThreadPoolExecutor(len(brokers)) as pool:
                    list(pool.map(Kafka.stop, brokers))
        return [part.name for part in running]

    def _members(self) -> list[PatroniNode]:
        return self.cluster.nodes if self.cluster else []

    def status(self) -> list[PartStatus]:
        """The standing parts, and the optional ones that are running."""
        return [part.status() for part in self.parts
                if part.name in self.standing or part.pid() is not None]  # fmt: skip
