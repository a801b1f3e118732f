"""Apache Kafka 4.x: one KRaft node (broker and controller), from Maven Central jars.

The quorum is declared statically (``controller.quorum.voters``) rather than
formatted with ``--standalone``: with a static voter set the controller's
address lives only in the properties file, so the node keeps working if
its ports are ever chosen anew.
"""

from __future__ import annotations

import logging
import socket
import subprocess
from importlib import resources
from pathlib import Path

from handoff.core import kafka
from handoff.core.errors import ServiceStartFailed
from handoff.stack.artifacts import kafka_lib
from handoff.stack.java import find_java
from handoff.stack.part import Part
from handoff.stack.procs import home_marker, running_pid, spawn, stop_pid

_quiet = logging.getLogger("handoff.stack.kafka.probe")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class Kafka(Part):
    name = "kafka"

    @property
    def dir(self) -> Path:
        return self.layout.part_dir("kafka")

    def address(self) -> str:
        return f"127.0.0.1:{self.state.ports.kafka}"

    def _properties(self) -> str:
        p = self.state.ports
        s = self.layout.settings
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{p.kafka_controller}",
                f"listeners=PLAINTEXT://127.0.0.1:{p.kafka},CONTROLLER://127.0.0.1:{p.kafka_controller}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{p.kafka}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={self.dir / 'data'}",
                f"num.partitions={s.kafka_partitions}",
                "auto.create.topics.enable=true",
                # one node: every internal topic has a single replica
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "min.insync.replicas=1",
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
            "-t",
            self.state.kafka_cluster_id,
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

    def start(self) -> None:
        heap = self.layout.settings.kafka_heap_mb
        spawn(
            [
                str(self.java),
                f"-Xms{heap}m",
                f"-Xmx{heap}m",
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
                "-Djava.awt.headless=true",
                home_marker(self.layout.home),
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.xml'}",
                f"-Dkafka.logs.dir={self.layout.logs}",
                "-cp",
                f"{self.lib}/*",
                "kafka.Kafka",
                str(self.dir / "server.properties"),
            ],
            log=self.log,
            pid_file=self.layout.pid_file(self.name),
            cwd=self.dir,
        )

    def pid(self) -> int | None:
        return running_pid(self.layout.pid_file(self.name), home_marker(self.layout.home))

    def problem(self) -> str | None:
        port = self.state.ports.kafka
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError as exc:
            return f"port {port}: {exc.strerror or exc}"
        # A quiet logger keeps librdkafka's connection-refused noise out of the
        # terminal while we poll.
        try:
            meta = kafka.admin(self.address(), 3.0, _quiet).list_topics(timeout=3)
        except Exception as exc:  # KafkaException carries librdkafka's reason
            return f"metadata request failed: {exc}"
        return None if meta.brokers else "no broker in cluster metadata yet"

    def stop(self) -> None:
        if (pid := self.pid()) is not None:
            stop_pid(pid, timeout_s=45)
        self.layout.pid_file(self.name).unlink(missing_ok=True)
