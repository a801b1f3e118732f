"""Pytest plugin: clusters beside the shared stack, each a stack home of its own.

``kafka_cluster``: three brokers only; its ``stack.env`` points processes at
the shared stack's PostgreSQL and registry and at the cluster's brokers.
``pg_cluster``: the whole clustered stack (a two-node Patroni PostgreSQL and
its ZooKeeper, three brokers, a registry storing in the cluster), as a user
runs it. Processes started with ``HANDOFF_HOME=<cluster home>`` run against
them exactly as a user's would. Each starts once (about 20-30 s) and is
stopped when its tests are done, so no cluster outlives the tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import psycopg
import pytest

from handoff.core.errors import StackError
from handoff.core.kafka import admin
from handoff.core.settings import HandoffSettings, load_settings
from handoff.stack.kafka import Kafka
from handoff.stack.layout import StackSettings
from handoff.stack.local import LocalStack
from handoff.stack.migrate import upgrade
from handoff.stack.patroni import PatroniNode
from handoff.stack.procs import wait_until
from tests.consumer_apps import EFFECTS_DDL
from tests.fix_stack import point_home_at

BROKERS = 3
_Cluster = TypeVar("_Cluster", "KafkaCluster", "PostgresCluster")


class KafkaCluster:
    """The cluster's stack, and what the tests do to its nodes."""

    def __init__(self, stack: LocalStack, shared: HandoffSettings) -> None:
        self.stack, self.shared = stack, shared
        self.home = stack.layout.home
        self.logs = stack.layout.logs
        self.bootstrap = stack.bootstrap_servers()

    def _point_processes_here(self) -> None:
        # ``up`` writes the home's own addresses; this home has no PostgreSQL.
        point_home_at(self.home, self.shared.model_copy(update={"kafka_bootstrap": self.bootstrap}))

    def node_names(self) -> list[str]:
        return [broker.name for broker in self.stack.brokers]

    def leader_of(self, topic: str, partition: int = 0) -> Kafka:
        meta = admin(self.bootstrap).list_topics(topic, timeout=10)
        leader = meta.topics[topic].partitions[partition].leader
        return self.stack.brokers[leader - 1]

    def kill(self, broker: Kafka) -> None:
        """SIGKILL, as a machine that loses power: no controlled shutdown, no leader hand-over."""
        pid = broker.pid()
        assert pid is not None, f"{broker.name} is not running"
        process = psutil.Process(pid)
        process.kill()
        process.wait(30)

    def restart(self, broker: Kafka) -> None:
        self.stack.up([broker.name])
        self._point_processes_here()

    def up(self) -> None:
        self.stack.up(self.node_names())
        self._point_processes_here()


# Module scope: stopped once the broker tests are done, so its brokers and the
# clustered stack's (pg_cluster) never run at the same time on a small machine.
@pytest.fixture(scope="module")
def kafka_cluster(
    local_stack: LocalStack,
    migrated: HandoffSettings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KafkaCluster]:
    home = tmp_path_factory.mktemp("kafka-cluster")
    settings = StackSettings(home=home, cache_dir=local_stack.settings.cache_dir, brokers=BROKERS)
    stack = LocalStack(settings, console=local_stack.console)
    yield from _running(stack, KafkaCluster(stack, migrated), "the three-broker cluster")


class PostgresCluster:
    """A clustered stack home of its own: a Patroni PostgreSQL of two nodes (strict
    synchronous mode) with its ZooKeeper, three brokers and a registry storing in the
    cluster; processes started with ``HANDOFF_HOME=<its home>`` use nothing else."""

    def __init__(self, stack: LocalStack) -> None:
        assert stack.cluster is not None
        self.stack, self.cluster = stack, stack.cluster
        self.home, self.logs = stack.layout.home, stack.layout.logs

    @property
    def settings(self) -> HandoffSettings:
        return load_settings(self.home)

    def primary(self) -> PatroniNode:
        leader = self.cluster.leader()
        assert leader is not None, "the cluster has no primary"
        return self.cluster.node(leader)

    def timeline(self) -> int:
        return max(m.timeline or 0 for m in self.cluster.members())

    def crash_primary(self, timeout_s: float = 90) -> PatroniNode:
        """SIGKILL the primary (Patroni and PostgreSQL); return it once a standby leads."""
        lost = self.primary()
        lost.crash()
        self.cluster.wait_new_leader(lost.name, timeout_s)
        return lost

    def rejoin(self, node: PatroniNode, timeout_s: float = 120) -> None:
        """Start a lost node again and wait until it streams as the synchronous standby."""
        self.stack.up([node.name])

        def synchronous() -> bool:
            try:
                return any(
                    m.name == node.name and m.role == "sync_standby" and m.state == "streaming"
                    for m in self.cluster.members()
                )
            except StackError:
                return False

        assert wait_until(synchronous, timeout_s, 0.5), self.cluster.members()

    def up(self) -> None:
        self.stack.up()
        upgrade(self.settings)
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            conn.execute(EFFECTS_DDL)


@pytest.fixture(scope="session")
def pg_cluster(
    local_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PostgresCluster]:
    home = tmp_path_factory.mktemp("full-cluster")
    settings = StackSettings(
        home=home, cache_dir=local_stack.settings.cache_dir, pg_nodes=2, brokers=BROKERS
    )
    stack = LocalStack(settings, console=local_stack.console)
    yield from _running(stack, PostgresCluster(stack), "the clustered stack")


def _running(stack: LocalStack, cluster: _Cluster, what: str) -> Iterator[_Cluster]:
    """The cluster up for its tests and stopped after them, or the tests failed."""
    try:
        cluster.up()
    except StackError as exc:
        stack.down()
        pytest.fail(f"{what} did not come up: {exc}", pytrace=False)
    except BaseException:  # a database error in the migrations, an interrupt: stop it all
        stack.down()
        raise
    try:
        yield cluster
    finally:
        stack.down()


def run_chaos(home: Path, seed: int, *args: str) -> tuple[dict[str, Any], str]:
    """``handoff chaos ... --seed S --json`` in ``home``: its figures and what to say when
    an assertion fails (the seed, the exit status and the end of its output)."""
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "chaos", *args, "--seed", str(seed), "--json"],
        env={**os.environ, "HANDOFF_HOME": str(home), "COLUMNS": "120"},
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    said = f"seed {seed}, exit {done.returncode}:\n{done.stderr[-6000:]}"
    assert done.stdout.strip(), said
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"chaos seed {seed}: {figures}")
    assert done.returncode == 0 and figures["ok"], said
    assert figures["lost"] == 0 and figures["doubled"] == 0, said
    return figures, said
