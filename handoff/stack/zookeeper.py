"""Apache ZooKeeper, standalone, from Maven Central jars: the Patroni cluster's store.

Patroni keeps the leader lock, the members and the synchronous standby's
name in a distributed configuration store; of the stores it supports,
ZooKeeper is the one Maven Central serves, so it is resolved like Kafka's
jars. One server is enough for one machine: the store's own quorum is not
what the local cluster tests (production runs three or five, docs/deploy.md).
"""

from __future__ import annotations

import socket
from pathlib import Path

from handoff.stack.artifacts import zookeeper_lib
from handoff.stack.java import find_java
from handoff.stack.part import Part
from handoff.stack.procs import home_marker, running_pid, spawn, stop_pid


class ZooKeeper(Part):
    name = "zookeeper"

    @property
    def dir(self) -> Path:
        return self.layout.part_dir(self.name)

    @property
    def port(self) -> int:
        return self.layout.port(self.state, self.name, self.layout.settings.zookeeper_port)

    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def prepare(self) -> None:
        s = self.layout.settings
        self.lib = zookeeper_lib(s.cache_dir, s.zookeeper_version, self.console)
        self.java = find_java(17, s.kafka_java, "ZooKeeper")
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        (self.dir / "zoo.cfg").write_text(
            "\n".join(
                [
                    "tickTime=1000",
                    f"dataDir={self.dir / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    # Patroni's session timeout is its ttl (20 s); allow it.
                    "minSessionTimeout=2000",
                    "maxSessionTimeout=60000",
                    # The admin server would take port 8080 of the whole machine.
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr",
                    "autopurge.purgeInterval=1",
                    "",
                ]
            )
        )

    def start(self) -> None:
        spawn(
            [
                str(self.java),
                "-Xmx128m",
                "-XX:+UseSerialGC",
                home_marker(self.layout.home),
                "-cp",
                f"{self.lib}/*",
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(self.dir / "zoo.cfg"),
            ],
            log=self.log,
            pid_file=self.layout.pid_file(self.name),
            cwd=self.dir,
        )

    def pid(self) -> int | None:
        return running_pid(self.layout.pid_file(self.name), home_marker(self.layout.home))

    def problem(self) -> str | None:
        # "srvr" reports the server's version once it serves clients ("ruok"
        # says "imok" even while the database failed to load).
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                sock.sendall(b"srvr")
                answer = sock.recv(512).decode(errors="replace")
        except OSError as exc:
            return f"port {self.port}: {exc.strerror or exc}"
        return None if answer.startswith("Zookeeper version") else answer.strip()[:200]

    def stop(self) -> None:
        if (pid := self.pid()) is not None:
            stop_pid(pid, timeout_s=20)
        self.layout.pid_file(self.name).unlink(missing_ok=True)
