"""Settings of the local stack and the files it keeps under its home folder.

Everything a running stack needs to be found again lives in ``<home>``:
``stack.json`` (ports and passwords chosen on first start, mode 600),
``stack.env`` (the shell-ready ``HANDOFF_*`` lines that ``load_settings``
reads), ``logs/`` (one file per part) and one data folder per part.
Downloads are cached outside the project, in ``<cache_dir>``.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from handoff.core.errors import StackError
from handoff.core.settings import STACK_ENV_FILE, default_home


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "handoff"


class StackSettings(BaseSettings):
    """How ``handoff stack up`` runs the parts. Variables: ``HANDOFF_STACK_*``."""

    model_config = SettingsConfigDict(env_prefix="HANDOFF_STACK_", extra="ignore")

    home: Annotated[Path, Field(description="Data, logs and chosen settings.")] = Field(
        default_factory=default_home
    )
    cache_dir: Annotated[
        Path, Field(description="Downloaded Kafka jars and registry, shared by checkouts.")
    ] = Field(default_factory=_default_cache)
    postgres_port: Annotated[int, Field(description="Preferred PostgreSQL port.")] = 15432
    kafka_port: Annotated[int, Field(description="Preferred Kafka client port.")] = 19092
    kafka_controller_port: Annotated[int, Field(description="Preferred KRaft controller port.")] = (
        19093
    )
    registry_port: Annotated[int, Field(description="Preferred schema registry port.")] = 18080
    registry_management_port: Annotated[
        int, Field(description="Preferred registry management (health) port.")
    ] = 18081
    dynamodb_port: Annotated[
        int, Field(description="Preferred port of DynamoDB (moto's server), when started.")
    ] = 18955
    kafka_version: Annotated[str, Field(description="org.apache.kafka:kafka_2.13 version.")] = (
        "4.1.1"
    )
    connect_version: Annotated[
        str, Field(description="org.apache.kafka:connect-runtime version (bench peer).")
    ] = "4.3.0"
    debezium_version: Annotated[
        str, Field(description="io.debezium:debezium-connector-postgres version (bench peer).")
    ] = "3.6.1.Final"
    registry_version: Annotated[
        str, Field(description="io.apicurio:apicurio-registry-app version (3.x).")
    ] = "3.3.3"
    kafka_heap_mb: Annotated[int, Field(ge=128, description="Kafka JVM heap.")] = 512
    kafka_jvm_options: Annotated[
        str,
        Field(
            description="More options for each broker's JVM, as a shell would split them, "
            "after the stack's own (so they win): '-XX:TieredStopAtLevel=1' starts a broker "
            "without its JIT warm-up (README 'A broker's first run').",
        ),
    ] = ""
    registry_heap_mb: Annotated[int, Field(ge=128, description="Registry JVM heap.")] = 384
    kafka_partitions: Annotated[
        int, Field(ge=1, description="Default partitions of auto-created topics.")
    ] = 6
    start_timeout_s: Annotated[
        float, Field(gt=0, description="How long to wait for each part to become healthy.")
    ] = 120.0
    kafka_java: Annotated[
        Path | None, Field(description="java executable for Kafka (17+); found if unset.")
    ] = None
    registry_java: Annotated[
        Path | None, Field(description="java executable for the registry (21+); found if unset.")
    ] = None
    postgres_os_user: Annotated[
        str, Field(description="OS user that runs PostgreSQL when the stack is started as root.")
    ] = "handoff-pg"
    zookeeper_version: Annotated[
        str, Field(description="org.apache.zookeeper:zookeeper version (Patroni's store).")
    ] = "3.9.5"
    zookeeper_port: Annotated[
        int, Field(description="Preferred ZooKeeper client port (a PostgreSQL cluster only).")
    ] = 12181
    patroni_port: Annotated[
        int, Field(description="Preferred Patroni REST API port of the first PostgreSQL node.")
    ] = 18008
    pg_nodes: Annotated[
        int | None,
        Field(
            ge=1,
            le=3,
            description="PostgreSQL nodes of a new stack home: 1 is a lone server, 2 or 3 a "
            "Patroni cluster (a primary and synchronous standbys); recorded on its first start.",
        ),
    ] = None
    brokers: Annotated[
        int | None,
        Field(
            ge=1,
            le=5,
            description="Kafka brokers of a new stack home (1 or 3 usually); recorded on its "
            "first start, so unset means what the home already runs (1 for a new one).",
        ),
    ] = None

    citus: Annotated[
        int | None,
        Field(
            ge=2,
            le=8,
            description="Citus workers of a new stack home: the database is a Citus "
            "coordinator and this many workers, Handoff's tables distributed by tenant; "
            "recorded on its first start (0: not a Citus home).",
        ),
    ] = None
    citus_source: Annotated[
        Path | None,
        Field(
            description="A Citus source release (.tar.gz or folder) to build once against "
            "the stack's PostgreSQL when it has no Citus installed (stack/citus_build.py)."
        ),
    ] = None

    @field_validator("kafka_jvm_options")
    @classmethod
    def _jvm_options(cls, value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot be split into options: {exc}") from None
        if odd := [word for word in words if not word.startswith("-")]:
            raise ValueError(f"JVM options begin with '-'; not {odd}")
        return value

    @field_validator(
        "postgres_port",
        "kafka_port",
        "kafka_controller_port",
        "registry_port",
        "registry_management_port",
        "dynamodb_port",
        "zookeeper_port",
        "patroni_port",
    )
    @classmethod
    def _port(cls, value: int) -> int:
        if not 1024 <= value <= 65535:
            raise ValueError("must be a port between 1024 and 65535")
        return value

    @field_validator("home", "cache_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().absolute()


@dataclass
class Ports:
    postgres: int
    kafka: int
    kafka_controller: int
    registry: int
    registry_management: int
    dynamodb: int = 0  # chosen on its first start (a stack recorded before it existed has 0)
    # Ports of the parts a clustered stack adds (kafka-2, kafka-2-controller, ...),
    # chosen when first needed so a single-node home records none of them.
    more: dict[str, int] = field(default_factory=dict)

    def all(self) -> set[int]:
        standing = {self.postgres, self.kafka, self.kafka_controller, self.registry}
        return standing | {self.registry_management, self.dynamodb, *self.more.values()}


@dataclass
class Secrets:
    """Passwords of the local PostgreSQL roles, generated once per home."""

    postgres: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    handoff: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    registry: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    # Patroni's streaming-replication and pg_rewind roles (a PostgreSQL cluster only).
    replication: str = field(default_factory=lambda: secrets.token_urlsafe(18))


@dataclass
class StackState:
    """What the first ``up`` chose; later runs reuse it so addresses stay put."""

    ports: Ports
    secrets: Secrets
    kafka_cluster_id: str
    # Fixed at the first start: a KRaft quorum's voters are written into every
    # node's storage, so a home cannot change its broker count in place.
    brokers: int = 1
    # Fixed too: a lone server's data folder is not a Patroni member's.
    pg_nodes: int = 1
    # A lone server does not become a Citus coordinator, nor the reverse (0: no
    # Citus); a Citus home's worker count changes (stack up --citus N).
    citus_workers: int = 0


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


# Where the kernel takes the local port of an outgoing connection. A server port
# inside it can be held by any client for as long as its connection lives (a
# producer's link to the broker, say), so a part that starts later finds "its"
# port taken. Linux says where the range is; elsewhere 49152 up is the IANA
# range macOS and Windows use, and Linux's default starts at 32768.
_EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_EPHEMERAL_DEFAULT = (32768, 65535)
# Fallback ports come from here, below every kernel's ephemeral range.
_FALLBACK_FLOOR = 20000


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        low, high = (int(part) for part in _EPHEMERAL_FILE.read_text().split())
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT
    return low, high


def pick_port(preferred: int, taken: set[int]) -> int:
    """The preferred port if it is free, else a free one outside the ephemeral range.

    A second checkout (or CI's fresh clone next to a developer's stack) must
    not collide with the first, so a busy preferred port is not an error.
    """
    if preferred not in taken and port_is_free(preferred):
        return preferred
    low = min(ephemeral_range()[0], _EPHEMERAL_DEFAULT[0])
    candidates = [p for p in range(_FALLBACK_FLOOR, low) if p not in taken]
    for candidate in secrets.SystemRandom().sample(candidates, k=min(len(candidates), 200)):
        if port_is_free(candidate):
            return candidate
    # Every one tried is busy: let the kernel choose, inside its range.
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in taken:
            return port


class Layout:
    """Paths of one stack home."""

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.home = settings.home
        self.logs = self.home / "logs"
        self.state_file = self.home / "stack.json"
        self.env_file = self.home / STACK_ENV_FILE

    def part_dir(self, name: str) -> Path:
        return self.home / name

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.part_dir(name) / "pid"

    def ensure_dirs(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)

    def load_state(self) -> StackState | None:
        if not self.state_file.exists():
            return None
        raw = json.loads(self.state_file.read_text())
        state = StackState(
            ports=Ports(**raw["ports"]),
            secrets=Secrets(**raw["secrets"]),
            kafka_cluster_id=raw["kafka_cluster_id"],
            brokers=raw.get("brokers", 1),
            pg_nodes=raw.get("pg_nodes", 1),
            citus_workers=raw.get("citus_workers", 0),
        )
        for what, wanted, has, why in (
            ("Kafka broker(s)", self.settings.brokers, state.brokers,
             "a KRaft quorum cannot change size in place"),
            ("PostgreSQL node(s)", self.settings.pg_nodes, state.pg_nodes,
             "a lone server and a Patroni cluster keep their data differently"),
            ("Citus worker(s)", self.settings.citus, state.citus_workers,
             "a Citus database keeps its tables on its workers"),
        ):  # fmt: skip
            if what.startswith("Citus") and wanted and has:
                continue  # a Citus home grows and shrinks (LocalStack resizes it)
            if wanted is not None and wanted != has:
                raise StackError(
                    f"the stack in {self.home} runs {has} {what}, not {wanted}: {why}. "
                    "Use another home for a cluster (HANDOFF_STACK_HOME=... or "
                    f"HANDOFF_HOME=...), or stop this one and remove {self.home} to start over."
                )
        return state

    def save_state(self, state: StackState) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.chmod(0o600)
        tmp.replace(self.state_file)

    def choose_state(self) -> StackState:
        """Load the recorded choices, or make them on the very first start."""
        state = self.load_state()
        if state is not None:
            return state
        s = self.settings
        taken: set[int] = set()

        def take(preferred: int) -> int:
            taken.add(port := pick_port(preferred, taken))
            return port

        ports = Ports(
            postgres=take(s.postgres_port),
            kafka=take(s.kafka_port),
            kafka_controller=take(s.kafka_controller_port),
            registry=take(s.registry_port),
            registry_management=take(s.registry_management_port),
        )
        state = StackState(
            ports=ports,
            secrets=Secrets(),
            kafka_cluster_id=_kafka_cluster_id(),
            brokers=s.brokers or 1,
            pg_nodes=s.pg_nodes or 1,
            citus_workers=s.citus or 0,
        )
        if state.citus_workers and state.pg_nodes > 1:
            raise StackError(
                "a stack home is either a Citus cluster (--citus N) or a Patroni cluster "
                "(--pg-nodes N), not both: Citus nodes with standbys are not part of the "
                "local stack"
            )
        self.save_state(state)
        return state

    def port(self, state: StackState, name: str, preferred: int) -> int:
        """The port recorded for ``name``, or a free one chosen now and recorded."""
        if name not in state.ports.more:
            state.ports.more[name] = pick_port(preferred, state.ports.all())
            self.save_state(state)
        return state.ports.more[name]


def _kafka_cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 without padding.

    The same form ``kafka-storage random-uuid`` prints; making it here saves
    one JVM start on first boot.
    """
    import base64
    import uuid

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
