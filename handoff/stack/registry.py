"""Apicurio Registry 3.x, storing schemas in the stack's PostgreSQL.

Clients use its Confluent-compatible API (``/apis/ccompat/v7``). Storage is
the ``apicurio`` database rather than the default in-memory H2, so schema
ids survive a restart, as a real registry's do.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from rich.console import Console

from handoff.stack.artifacts import registry_dist
from handoff.stack.java import find_java
from handoff.stack.layout import Layout, StackState
from handoff.stack.part import Part
from handoff.stack.postgres import REGISTRY_ROLE, Postgres
from handoff.stack.procs import home_marker, running_pid, spawn, stop_pid

CCOMPAT_PATH = "/apis/ccompat/v7"


class Registry(Part):
    name = "registry"

    def __init__(
        self, layout: Layout, state: StackState, console: Console, postgres: Postgres
    ) -> None:
        super().__init__(layout, state, console)
        self.postgres = postgres

    @property
    def dir(self) -> Path:
        return self.layout.part_dir("registry")

    def url(self) -> str:
        return f"http://127.0.0.1:{self.state.ports.registry}{CCOMPAT_PATH}"

    def address(self) -> str:
        return self.url()

    def prepare(self) -> None:
        s = self.layout.settings
        self.dist = registry_dist(s.cache_dir, s.registry_version, self.console)
        # Apicurio 3.3 is compiled for Java 21 (class file 65).
        self.java = find_java(21, s.registry_java, "Apicurio Registry")

    def start(self) -> None:
        p = self.state.ports
        heap = self.layout.settings.registry_heap_mb
        env = {
            "QUARKUS_HTTP_HOST": "127.0.0.1",
            "QUARKUS_HTTP_PORT": str(p.registry),
            # 3.x opens a management port even when told not to; pin it to loopback.
            "QUARKUS_MANAGEMENT_HOST": "127.0.0.1",
            "QUARKUS_MANAGEMENT_PORT": str(p.registry_management),
            "APICURIO_STORAGE_KIND": "sql",
            "APICURIO_STORAGE_SQL_KIND": "postgresql",
            "APICURIO_DATASOURCE_URL": self.postgres.registry_jdbc_url(),
            "APICURIO_DATASOURCE_USERNAME": REGISTRY_ROLE,
            "APICURIO_DATASOURCE_PASSWORD": self.state.secrets.registry,
            # A pooled connection to a primary that died (a failover, a restart)
            # is dead too: validate each one as it is borrowed and drop the dead,
            # or the registry answers 500 until it is restarted (seen in a chaos
            # run). Fewer idle connections than its default 20 keep that cheap.
            "QUARKUS_DATASOURCE_POSTGRESQL_JDBC_VALIDATION_QUERY_SQL": "SELECT 1",
            "QUARKUS_DATASOURCE_POSTGRESQL_JDBC_VALIDATE_ON_BORROW": "true",
            "QUARKUS_DATASOURCE_POSTGRESQL_JDBC_BACKGROUND_VALIDATION_INTERVAL": "10S",
            "APICURIO_DATASOURCE_JDBC_INITIAL_SIZE": "2",
            "APICURIO_DATASOURCE_JDBC_MIN_SIZE": "2",
            "APICURIO_DATASOURCE_JDBC_MAX_SIZE": "20",
        }
        spawn(
            [
                str(self.java),
                f"-Xmx{heap}m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                home_marker(self.layout.home),
                "-jar",
                str(self.dist / "quarkus-run.jar"),
            ],
            log=self.log,
            pid_file=self.layout.pid_file(self.name),
            cwd=self.dir,
            env=env,
        )

    def pid(self) -> int | None:
        return running_pid(self.layout.pid_file(self.name), home_marker(self.layout.home))

    def problem(self) -> str | None:
        try:
            response = httpx.get(f"{self.url()}/subjects", timeout=2)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if response.status_code != 200:
            return f"GET /subjects answered {response.status_code}"
        return None

    def stop(self) -> None:
        if (pid := self.pid()) is not None:
            stop_pid(pid, timeout_s=30)
        self.layout.pid_file(self.name).unlink(missing_ok=True)
