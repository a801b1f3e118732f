"""One member of a Patroni-managed PostgreSQL cluster: the server of the embedded wheel.

Patroni (from PyPI) runs each node's PostgreSQL, holds the leader lock in
ZooKeeper, promotes the synchronous standby when the primary's lock
expires, and makes the old primary a standby again (``pg_rewind``) when it
comes back. Handoff's own code never picks a primary: clients are given
every node's address with ``target_session_attrs=read-write``.

Strict synchronous mode is on: the primary acknowledges a commit only when a
standby has it, so a receipt, a consumer's unit or an effect's record that
Handoff acknowledged survives the loss of the primary. The price is that
writes wait while no standby is connected (a two-node cluster with one node
down); the runbook says what to do then.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from handoff.core.errors import StackError
from handoff.stack.layout import Layout, StackState
from handoff.stack.postgres import SUPERUSER, Postgres, bin_dir, give_to, node_name
from handoff.stack.procs import running_pid, spawn, stop_pid, wait_until

SCOPE = "handoff"
REPLICATION_ROLE = "replicator"
REST_ROLE = "patroni"

# Failover timing. ttl is the leader lock's lifetime (Patroni's minimum, 20 s):
# a dead primary is replaced about ttl + loop_wait after it stopped renewing.
DCS = {
    "ttl": 20,
    "loop_wait": 2,
    "retry_timeout": 5,
    # A standby further behind than this is not promoted (it would lose commits
    # that strict synchronous mode acknowledged on another standby).
    "maximum_lag_on_failover": 1048576,
    "synchronous_mode": True,
    "synchronous_mode_strict": True,
}


def rest_port(layout: Layout, state: StackState, node: int) -> int:
    preferred = layout.settings.patroni_port + node - 1  # 18008, 18009, 18010
    return layout.port(state, f"{node_name(node)}-rest", preferred)


@dataclass(frozen=True)
class Member:
    """One node as ``GET /cluster`` lists it."""

    name: str
    role: str  # leader, sync_standby, replica
    state: str  # running, streaming, starting, stopped...
    timeline: int | None
    lag_bytes: int | None  # None for the leader or when unknown

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Member:
        lag = raw.get("lag")
        return cls(
            name=str(raw.get("name")),
            role=str(raw.get("role")),
            state=str(raw.get("state")),
            timeline=raw.get("timeline"),
            lag_bytes=lag if isinstance(lag, int) else None,
        )

    def describe(self) -> str:
        role = self.role.replace("_", " ")
        said = f"{role}, timeline {self.timeline}" if self.timeline else role
        if self.role != "leader":
            said += f", {self.state}"
            said += f", lag {self.lag_bytes} B" if self.lag_bytes is not None else ", lag unknown"
        return said


class PatroniNode(Postgres):
    @property
    def config(self) -> Path:
        return self.layout.part_dir(self.name) / "patroni.yml"

    @property
    def rest_port(self) -> int:
        return rest_port(self.layout, self.state, self.node)

    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def _patroni_config(self) -> dict[str, Any]:
        s = self.state.secrets
        here = f"127.0.0.1:{self.port}"
        rest = f"127.0.0.1:{self.rest_port}"
        zookeeper = self.layout.port(self.state, "zookeeper", self.layout.settings.zookeeper_port)
        return {
            "scope": SCOPE,
            "namespace": "/handoff/",
            "name": self.name,
            "log": {"level": "INFO", "format": "%(asctime)s %(levelname)s: %(message)s"},
            "restapi": {
                "listen": rest,
                "connect_address": rest,
                "authentication": {"username": REST_ROLE, "password": s.replication},
            },
            "zookeeper": {"hosts": [f"127.0.0.1:{zookeeper}"]},
            "bootstrap": {
                "dcs": {
                    **DCS,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        # Settings every node must share live in the store.
                        "parameters": {
                            "max_connections": 300,
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_keep_size": "512MB",
                            "wal_log_hints": "on",
                            "hot_standby": "on",
                        },
                    },
                },
                "initdb": [
                    {"encoding": "UTF8"},
                    {"locale": "C"},
                    {"auth-host": "scram-sha-256"},
                    {"auth-local": "trust"},
                ],
            },
            "postgresql": {
                "listen": here,
                "connect_address": here,
                "data_dir": str(self.data),
                "bin_dir": str(bin_dir()),
                "pgpass": str(self.data.parent / "pgpass"),
                "authentication": {
                    "superuser": {"username": SUPERUSER, "password": s.postgres},
                    "replication": {"username": REPLICATION_ROLE, "password": s.replication},
                    "rewind": {"username": SUPERUSER, "password": s.postgres},
                },
                "pg_hba": [
                    "local all all trust",
                    f"host replication {REPLICATION_ROLE} 127.0.0.1/32 scram-sha-256",
                    "host all all 127.0.0.1/32 scram-sha-256",
                ],
                "parameters": {
                    "unix_socket_directories": "",
                    "shared_buffers": "256MB",
                    "log_line_prefix": "%m [%p] %u@%d ",
                    "log_min_messages": "warning",
                },
            },
        }

    # -- lifecycle ---------------------------------------------------------------

    def prepare(self) -> None:
        user = self._os_user()
        root = self.data.parent
        root.mkdir(parents=True, exist_ok=True)
        self.layout.ensure_dirs()
        self.log.touch()
        self.config.write_text(yaml.safe_dump(self._patroni_config(), sort_keys=False))
        self.config.chmod(0o600)  # it holds the passwords
        if user is not None:
            self._make_traversable(root)
            self._make_traversable(bin_dir() / "postgres")
            # Patroni runs on this interpreter, which may live under /root (pyenv).
            self._make_traversable(Path(sys.executable))
            self._make_traversable(Path(sys.executable).resolve())
            give_to(user, root)
            give_to(user, self.log)

    def start(self) -> None:
        # Patroni starts (or adopts) PostgreSQL itself; as the server's OS user,
        # since PostgreSQL refuses root.
        spawn(
            [sys.executable, "-m", "patroni", str(self.config)],
            log=self.log,
            pid_file=self.layout.pid_file(self.name),
            cwd=self.data.parent,
            user=self._os_user(),
        )

    def pid(self) -> int | None:
        """Patroni's pid: the node runs while its manager does (it restarts its server)."""
        return running_pid(self.layout.pid_file(self.name), str(self.config))

    def server_pid(self) -> int | None:
        return super().pid()

    def _get(self, path: str, timeout: float = 2.0) -> httpx.Response:
        return httpx.get(f"{self.rest_url()}{path}", timeout=timeout)

    def problem(self) -> str | None:
        # /health answers 200 while PostgreSQL runs, primary or standby.
        try:
            response = self._get("/health")
        except httpx.HTTPError as exc:
            return f"Patroni REST API: {type(exc).__name__}: {exc}"
        if response.status_code != 200:
            state = response.json().get("state", "?") if response.content else "?"
            return f"PostgreSQL is {state} (Patroni /health answered {response.status_code})"
        return None

    def role(self) -> str | None:
        for member in self.members():
            if member.name == self.name:
                return member.describe()
        return "not a cluster member yet"

    def members(self) -> list[Member]:
        response = self._get("/cluster")
        response.raise_for_status()
        return [Member.of(raw) for raw in response.json().get("members", [])]

    def stop(self) -> None:
        # SIGTERM: Patroni stops its PostgreSQL (fast) and leaves the cluster cleanly.
        if (pid := self.pid()) is not None:
            stop_pid(pid, timeout_s=60)
        self.layout.pid_file(self.name).unlink(missing_ok=True)
        if self.server_pid() is not None:  # a server whose manager had died
            self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def crash(self) -> None:
        """SIGKILL Patroni and its PostgreSQL, as a machine that lost power would stop."""
        for pid in (self.pid(), self.server_pid()):
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        server = self.server_pid()
        if server is not None:
            psutil.Process(server).wait(10)

    # -- moving the primary --------------------------------------------------------

    def _post(self, path: str, body: dict[str, str]) -> httpx.Response:
        return httpx.post(
            f"{self.rest_url()}{path}",
            json=body,
            auth=(REST_ROLE, self.state.secrets.replication),
            timeout=60,
        )


class Cluster:
    """The PostgreSQL nodes of a stack, asked through whichever node answers."""

    def __init__(self, nodes: list[PatroniNode]) -> None:
        self.nodes = nodes

    def node(self, name: str) -> PatroniNode:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise StackError(f"no PostgreSQL node named {name!r}; the nodes are {known}")

    def members(self) -> list[Member]:
        last: Exception | None = None
        for node in self.nodes:
            try:
                return node.members()
            except httpx.HTTPError as exc:
                last = exc
        raise StackError(f"no Patroni node answers ({last}); is the stack up?")

    def leader(self) -> str | None:
        return next((m.name for m in self.members() if m.role == "leader"), None)

    def move_primary(self, how: str, candidate: str | None, timeout_s: float = 90) -> str:
        """Switch over (planned: the old primary becomes a standby) or fail over
        (the way Patroni promotes when the primary is lost) and wait for the new
        primary; returns its name."""
        before = self.leader()
        if before is None:
            raise StackError("the cluster has no primary now; Patroni is electing one")
        standbys = [m.name for m in self.members() if m.role != "leader"]
        if candidate is not None and candidate not in standbys:
            raise StackError(f"{candidate!r} is not a standby; the standbys are {standbys}")
        if how == "failover" and candidate is None:
            if not standbys:
                raise StackError("no standby to fail over to")
            candidate = standbys[0]
        body = {"leader": before} if how == "switchover" else {}
        if candidate is not None:
            body["candidate"] = candidate
        response = self.node(before)._post(f"/{how}", body)
        if response.status_code != 200:
            raise StackError(f"Patroni refused the {how}: {response.text.strip()}")
        return self.wait_new_leader(before, timeout_s)

    def wait_new_leader(self, old: str, timeout_s: float) -> str:
        """The name of the node that leads once ``old`` no longer does (a switchover,
        or a standby promoted after ``old`` was lost); StackError after ``timeout_s``."""
        found: list[str | None] = [None]

        def moved() -> bool:
            try:
                found[0] = self.leader()
            except StackError:  # no node answers for a moment
                return False
            return found[0] not in (None, old)

        if not wait_until(moved, timeout_s, interval_s=0.5):
            raise StackError(f"no new primary after {timeout_s:.0f} s (still {found[0]})")
        return str(found[0])

    def set_synchronous(self, on: bool, superuser_url: str, timeout_s: float = 60) -> None:
        """Strict synchronous replication on or off (Patroni's dynamic configuration),
        waiting until the primary runs with it: for measuring what it costs."""
        import psycopg

        leader = self.leader()
        if leader is None:
            raise StackError("the cluster has no primary now")
        node = self.node(leader)
        response = httpx.patch(
            f"{node.rest_url()}/config",
            json={"synchronous_mode": on, "synchronous_mode_strict": on},
            auth=(REST_ROLE, node.state.secrets.replication),
            timeout=30,
        )
        if response.status_code != 200:
            raise StackError(f"Patroni refused the configuration: {response.text.strip()}")

        def applied() -> bool:
            with psycopg.connect(superuser_url, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SHOW synchronous_standby_names").fetchone()
            return bool(row and row[0]) == on

        if not wait_until(applied, timeout_s, 0.5):
            raise StackError(f"synchronous replication still {'off' if on else 'on'} after "
                             f"{timeout_s:.0f} s")  # fmt: skip

    def wait_writable(self, url: str, timeout_s: float) -> float:
        """Seconds until ``url`` (every node, read-write) accepts a connection."""
        import psycopg

        began = time.monotonic()

        def writable() -> bool:
            try:
                psycopg.connect(url, connect_timeout=2).close()
            except psycopg.OperationalError:
                return False
            return True

        if not wait_until(writable, timeout_s, interval_s=0.5):
            raise StackError(f"no PostgreSQL node took writes after {timeout_s:.0f} s")
        return time.monotonic() - began
