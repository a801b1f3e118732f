"""Apache Kafka 4.x: KRaft nodes (each a broker and a controller), from Maven Central jars.

One node by default; ``--brokers 3`` runs three, each a voter of the
controller quorum, with topics replicated three times and two in-sync
replicas required for a write (``min.insync.replicas=2``): with the relay's
``acks=all``, an acknowledged event survives the loss of any one broker,
and a partition stays writable while one is down.

The quorum is declared statically (``controller.quorum.voters``) rather than
formatted with ``--standalone``: with a static voter set the controllers'
addresses live only in the properties files, so the nodes keep working if
their ports are ever chosen anew.
"""

from __future__ import annotations

import logging
import shlex
import socket
import subprocess
from importlib import resources
from pathlib import Path

from rich.console import Console

from handoff.core import kafka
from handoff.core.errors import ServiceStartFailed
from handoff.stack.artifacts import kafka_lib
from handoff.stack.java import find_java
from handoff.stack.layout import Layout, StackState
from handoff.stack.part import Part
from handoff.stack.procs import home_marker, running_pid, spawn, stop_pid

_quiet = logging.getLogger("handoff.stack.kafka.probe")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def node_name(node: int) -> str:
    """``kafka`` for the first node (as a single-node stack has always called it), then kafka-N."""
    return "kafka" if node == 1 else f"kafka-{node}"


def replication(brokers: int) -> tuple[int, int]:
    """Replication factor and min.insync.replicas for a cluster of ``brokers``.

    Three copies, two of them needed to acknowledge: any one broker may die
    without losing an acknowledged write or stopping writes. Fewer brokers
    get what they can hold (two brokers: 2 copies, 1 needed).
    """
    factor = min(3, brokers)
    return factor, 2 if factor >= 3 else 1


class Kafka(Part):
    def __init__(self, layout: Layout, state: StackState, console: Console, node: int = 1) -> None:
        super().__init__(layout, state, console)
        self.node = node
        self.name = node_name(node)
        self._health: kafka.ClusterHealth | None = None  # what the last probe read

    @property
    def dir(self) -> Path:
        return self.layout.part_dir(self.name)

    def ports(self) -> tuple[int, int]:
        """This node's client and controller ports."""
        return node_ports(self.layout, self.state, self.node)

    def address(self) -> str:
        return f"127.0.0.1:{self.ports()[0]}"

    def _properties(self) -> str:
        client, controller = self.ports()
        brokers = self.state.brokers
        voters = ",".join(
            f"{n}@127.0.0.1:{node_ports(self.layout, self.state, n)[1]}"
            for n in range(1, brokers + 1)
        )
        factor, min_isr = replication(brokers)
        s = self.layout.settings
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={self.node}",
                f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{client}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={self.dir / 'data'}",
                f"num.partitions={s.kafka_partitions}",
                "auto.create.topics.enable=true",
                # Handoff creates its topics with the broker's default factor (-1),
                # so these two decide the durability of every event topic too.
                f"default.replication.factor={factor}",
                f"min.insync.replicas={min_isr}",
                f"offsets.topic.replication.factor={factor}",
                f"transaction.state.log.replication.factor={factor}",
                f"transaction.state.log.min.isr={min_isr}",
                f"share.coordinator.state.topic.replication.factor={factor}",
                f"share.coordinator.state.topic.min.isr={min_isr}",
                # A broker that comes back must not lead with a log it lost:
                # an out-of-sync replica never becomes leader.
                "unclean.leader.election.enable=false",
                "group.initial.rebalance.delay.ms=0",
                "",
            ]
        )

    def prepare(self) -> None:
        s = self.layout.settings
        self.lib = kafka_lib(s.cache_dir, s.kafka_version, self.console)
        self.java = find_java(17, s.kafka_java, "Kafka")
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "server.properties").write_text(self._properties())
        log4j = resources.files("handoff.stack") / "resources" / "kafka-log4j2.xml"
        (self.dir / "log4j2.xml").write_text(log4j.read_text())
        if (self.dir / "data" / "meta.properties").exists():
            return
        self.console.print("Formatting Kafka storage (first start only)…")
        command = [
            str(self.java),
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.xml'}",
            "-cp",
            f"{self.lib}/*",
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            # One argument with "=": a random id may begin with "-", which the
            # tool's parser would take for an option (1 home in 64).
            f"--cluster-id={self.state.kafka_cluster_id}",
            "-c",
            str(self.dir / "server.properties"),
        ]
        # Twice at most: a format once failed on a busy machine without saying why,
        # and formatting is idempotent (--ignore-formatted).
        for attempt in (1, 2):
            done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
            if done.returncode == 0:
                return
            # The reason is usually on stderr (an exception), the log4j noise on stdout.
            said = (done.stderr[-3000:] + "\n" + done.stdout[-1500:]).strip()
            if attempt == 2:
                raise ServiceStartFailed(
                    f"formatting Kafka storage failed (exit {done.returncode}):\n{said}"
                )
            self.console.print(f"formatting Kafka storage failed; once more:\n{said[-600:]}")

    def command(self, java: Path, lib: Path) -> list[str]:
        """The broker's command line (``java`` and ``lib`` are found by ``prepare``)."""
        s = self.layout.settings
        return [
            str(java),
            f"-Xms{s.kafka_heap_mb}m",
            f"-Xmx{s.kafka_heap_mb}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            # The user's last: a JVM takes the last of two contradicting options.
            *shlex.split(s.kafka_jvm_options),
            home_marker(self.layout.home),
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={self.layout.logs}",
            "-cp",
            f"{lib}/*",
            "kafka.Kafka",
            str(self.dir / "server.properties"),
        ]

    def start(self) -> None:
        spawn(
            self.command(self.java, self.lib),
            log=self.log,
            pid_file=self.layout.pid_file(self.name),
            cwd=self.dir,
        )

    def pid(self) -> int | None:
        return running_pid(self.layout.pid_file(self.name), home_marker(self.layout.home))

    def problem(self) -> str | None:
        port = self.ports()[0]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError as exc:
            return f"port {port}: {exc.strerror or exc}"
        # A quiet logger keeps librdkafka's connection-refused noise out of the
        # terminal while we poll.
        try:
            self._health = kafka.cluster_health(self.address(), 3.0, _quiet)
        except Exception as exc:  # KafkaException carries librdkafka's reason
            return f"metadata request failed: {exc}"
        # A node of a cluster is healthy once the cluster lists it as a broker.
        return None if self.node in self._health.up else "not yet a broker in cluster metadata"

    def role(self) -> str | None:
        # KRaft does not tell clients which controller is active (DescribeCluster
        # names a random broker), so a node says what it leads and what it lacks,
        # from the metadata its health probe (``problem``, just before) read.
        if self.state.brokers == 1:
            return None
        health = self._health
        assert health is not None, "role() follows a healthy problem()"
        led, behind = health.leading.get(self.node, 0), health.catching_up.get(self.node, 0)
        return f"leads {led} partitions" + (f", catching up on {behind}" if behind else "")

    def stop(self) -> None:
        if (pid := self.pid()) is not None:
            stop_pid(pid, timeout_s=45)
        self.layout.pid_file(self.name).unlink(missing_ok=True)


def node_ports(layout: Layout, state: StackState, node: int) -> tuple[int, int]:
    """Client and controller ports of ``node``; the first node's are the standing ones."""
    if node == 1:
        return state.ports.kafka, state.ports.kafka_controller
    s = layout.settings
    step = 10 * (node - 1)  # kafka-2 prefers 19102/19103, kafka-3 19112/19113
    name = node_name(node)
    return (
        layout.port(state, name, s.kafka_port + step),
        layout.port(state, f"{name}-controller", s.kafka_controller_port + step),
    )
