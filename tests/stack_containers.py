"""The test stack as containers (``HANDOFF_TEST_STACK=containers``), for people with Docker.

The same three parts as the local stack and ``docker-compose.yml`` (the same
images, which a unit test checks against the compose file), started with
testcontainers on a private network, on free host ports. Without a Docker
engine this fails with a message that says so: it never skips, and it never
falls back to the local stack behind the user's back.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psycopg

from handoff.core.errors import PrerequisiteMissing, ServiceStartFailed
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import pick_port

IMAGES = {
    "postgres": "postgres:18",
    "kafka": "apache/kafka:4.1.1",
    "registry": "apicurio/apicurio-registry:3.3.3",
}
INIT_SQL = Path(__file__).resolve().parents[1] / "docker" / "postgres-init.sql"
POSTGRES_ALIAS, KAFKA_ALIAS = "postgres", "kafka"


@dataclass(frozen=True)
class ContainerSpec:
    """One container: image, environment, and container port → host port."""

    name: str
    image: str
    env: dict[str, str]
    ports: dict[int, int]
    alias: str
    files: dict[str, Path] = field(default_factory=dict)


def specs(
    *, postgres_port: int, kafka_port: int, registry_port: int, password: str
) -> list[ContainerSpec]:
    """What runs, on which host ports. Pure: unit-tested without Docker."""
    return [
        ContainerSpec(
            "postgres",
            IMAGES["postgres"],
            {
                "POSTGRES_USER": "postgres",
                "POSTGRES_PASSWORD": password,
                "POSTGRES_HOST_AUTH_METHOD": "scram-sha-256",
                "POSTGRES_INITDB_ARGS": "--auth-host=scram-sha-256",
            },
            {5432: postgres_port},
            POSTGRES_ALIAS,
            {"/docker-entrypoint-initdb.d/10-handoff.sql": INIT_SQL},
        ),
        ContainerSpec(
            "kafka",
            IMAGES["kafka"],
            {
                "KAFKA_NODE_ID": "1",
                "KAFKA_PROCESS_ROLES": "broker,controller",
                "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@{KAFKA_ALIAS}:9093",
                "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093,HOST://:19092",
                # clients on the host reach the broker through the published port
                "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{KAFKA_ALIAS}:9092,"
                f"HOST://127.0.0.1:{kafka_port}",
                "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                "HOST:PLAINTEXT",
                "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
                "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
                "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
                "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
                "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
                "KAFKA_NUM_PARTITIONS": "6",
            },
            {19092: kafka_port},
            KAFKA_ALIAS,
        ),
        ContainerSpec(
            "registry",
            IMAGES["registry"],
            {
                "APICURIO_STORAGE_KIND": "sql",
                "APICURIO_STORAGE_SQL_KIND": "postgresql",
                "APICURIO_DATASOURCE_URL": f"jdbc:postgresql://{POSTGRES_ALIAS}:5432/apicurio",
                "APICURIO_DATASOURCE_USERNAME": "apicurio",
                "APICURIO_DATASOURCE_PASSWORD": "apicurio",
            },
            {8080: registry_port},
            "registry",
        ),
    ]


def settings_for(*, postgres_port: int, kafka_port: int, registry_port: int) -> HandoffSettings:
    """The HANDOFF_* settings the tests use against the containers."""
    return HandoffSettings(
        database_url=f"postgresql://handoff:handoff@127.0.0.1:{postgres_port}/handoff",
        kafka_bootstrap=f"127.0.0.1:{kafka_port}",
        schema_registry_url=f"http://127.0.0.1:{registry_port}/apis/ccompat/v7",
    )


def docker_problem() -> str | None:
    """Why no Docker engine answers at DOCKER_HOST (or the default socket), or None.

    A plain ``GET /_ping`` on the engine's socket: the Docker SDK's own check
    leaves its socket open when the engine is missing.
    """
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    parsed = urlparse(host)
    try:
        if parsed.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: Any = parsed.path
        elif parsed.scheme == "tcp":
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (parsed.hostname, parsed.port or 2375)
        else:
            return f"DOCKER_HOST={host} is neither unix:// nor tcp://"
        with sock:
            sock.settimeout(3)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(64)
    except OSError as exc:
        return f"{host}: {exc.strerror or exc}"
    return None if b" 200 " in reply else f"{host} answered {reply[:40]!r}"


class ContainerStack:
    """Starts the containers of ``specs()``; ``stop()`` removes them."""

    def __init__(self) -> None:
        taken: set[int] = set()
        self.ports = {}
        for name, preferred in (("postgres", 25432), ("kafka", 29092), ("registry", 28080)):
            self.ports[name] = pick_port(preferred, taken)
            taken.add(self.ports[name])
        self.containers: list[Any] = []
        self.network: Any = None

    @property
    def settings(self) -> HandoffSettings:
        return settings_for(
            postgres_port=self.ports["postgres"],
            kafka_port=self.ports["kafka"],
            registry_port=self.ports["registry"],
        )

    def up(self, timeout_s: float = 180) -> HandoffSettings:
        problem = docker_problem()
        if problem is not None:
            raise PrerequisiteMissing(
                "HANDOFF_TEST_STACK=containers needs a running Docker engine, and none answered "
                f"({problem}). Start Docker, or unset HANDOFF_TEST_STACK to use the local stack."
            )
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.network import Network

        self.network = Network().create()
        for spec in specs(
            postgres_port=self.ports["postgres"],
            kafka_port=self.ports["kafka"],
            registry_port=self.ports["registry"],
            password=secrets.token_urlsafe(16),
        ):
            container = DockerContainer(spec.image).with_envs(**spec.env)
            container.with_network(self.network).with_network_aliases(spec.alias)
            for inner, outer in spec.ports.items():
                container.with_bind_ports(inner, outer)
            for target, source in spec.files.items():
                container.with_volume_mapping(str(source), target, "ro")
            self.containers.append(container.start())
            if spec.name == "postgres":
                self._wait_for_postgres(timeout_s)
        return self.settings

    def _wait_for_postgres(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.settings.database_url, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                time.sleep(1)
        raise ServiceStartFailed("the postgres container did not accept logins in time")

    def stop(self) -> None:
        for container in reversed(self.containers):
            container.stop()
        if self.network is not None:
            self.network.remove()
