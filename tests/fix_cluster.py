"""Pytest plugin: a three-broker Kafka cluster beside the shared stack.

The cluster is a stack home of its own (``brokers=3``) that runs only its
brokers; its ``stack.env`` points processes at the shared stack's
PostgreSQL and registry and at the cluster's brokers, so ``handoff relay``
and ``handoff consume`` started with ``HANDOFF_HOME=<cluster home>`` run
against a replicated Kafka exactly as a user's would. It starts once per
session (about 20 s) and is stopped at the end, so three JVMs do not
outlive the tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

from handoff.core.errors import StackError
from handoff.core.kafka import admin
from handoff.core.settings import HandoffSettings
from handoff.stack.kafka import Kafka
from handoff.stack.layout import StackSettings
from handoff.stack.local import LocalStack
from tests.fix_stack import point_home_at

BROKERS = 3


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


@pytest.fixture(scope="session")
def kafka_cluster(
    local_stack: LocalStack,
    migrated: HandoffSettings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KafkaCluster]:
    home = tmp_path_factory.mktemp("kafka-cluster")
    settings = StackSettings(home=home, cache_dir=local_stack.settings.cache_dir, brokers=BROKERS)
    stack = LocalStack(settings, console=local_stack.console)
    cluster = KafkaCluster(stack, migrated)
    try:
        cluster.up()
    except StackError as exc:
        stack.down()
        pytest.fail(f"the three-broker cluster did not come up: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        stack.down()
