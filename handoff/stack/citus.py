"""A Citus cluster in the local stack: a coordinator and N workers (``stack up --citus N``).

Every node is a server of the stack's kind (``Postgres``) run from a build
with Citus (citus_build.py), with ``citus`` preloaded. Clients reach the
coordinator only, on TCP with scram-sha-256 as on a lone server.

How the nodes reach each other: a Unix socket folder that only the
server's OS user can enter (mode 0700), where every node also listens and
local connections are trusted (initdb's ``--auth-local=trust``). Citus
connects between nodes as the role of the session it works for (a
service's delegated emit runs on the worker as that service), so TCP with
passwords would need every service's secret in ``pg_dist_authinfo``, and
the wheel's server is built without SSL, so certificates are out. The
socket folder keeps inter-node trust to processes of the server's own OS
user (and root), while every client, on any node's TCP port, still proves
its role with its password: a service cannot act as another on any node.

Bootstrap order matters: roles are created on the coordinator after the
workers joined, in the database that has Citus, so that Citus propagates
them (and later to a worker added by a rebalance) and knows them as its own.
A role it did not create (made on each node by hand) is one it tries to
re-create when an object owned by it is propagated, and a non-superuser
may not set a role's SUPERUSER attribute, even to NOSUPERUSER.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console

from handoff.core.errors import StackError
from handoff.core.outbox_sql import WAKEUP_FLAG
from handoff.stack.layout import Layout, StackState
from handoff.stack.postgres import (
    APP_DB,
    APP_ROLE,
    DATABASE_EXISTS,
    REGISTRY_DB,
    REGISTRY_ROLE,
    ROLE_EXISTS,
    Postgres,
)

SERVICE_GROUP = "handoff_service"
# Roles that granted a membership (the app role grants each service the group),
# and, for each role a non-superuser granted, that grantor's admin membership in
# it (what let it grant).
GRANTORS = "SELECT DISTINCT grantor::regrole::text FROM pg_auth_members"
ADMINISTERED = """
SELECT DISTINCT m.roleid::regrole::text, m.member::regrole::text
  FROM pg_auth_members g
  JOIN pg_roles grantor ON grantor.oid = g.grantor AND NOT grantor.rolsuper
  JOIN pg_auth_members m ON m.roleid = g.roleid AND m.member = g.grantor AND m.admin_option
"""
# Whether the cluster has Handoff's schema (a relay wake-up flag on the coordinator).
HAS_SCHEMA = "SELECT 1 WHERE to_regclass('handoff.relay_wakeup') IS NOT NULL"
# Cleanup records (a move's leftover source shards, ...) still to drop on a node.
ORPHANS_ON_NODE = """
SELECT count(*) FROM pg_dist_cleanup c
  JOIN pg_dist_node n ON n.groupid = c.node_group_id
 WHERE n.nodename = %s AND n.nodeport = %s
"""
ORPHAN_DROP_TIMEOUT_S = 120.0
# Cleanup records of node groups that have no node any more: Citus never drops
# them, and their shards can never move again.
STRANDED_IDS = """
SELECT c.record_id FROM pg_dist_cleanup c
 WHERE NOT EXISTS (SELECT 1 FROM pg_dist_node n WHERE n.groupid = c.node_group_id)
"""
STRANDED_CLEANUPS = f"SELECT count(*) FROM ({STRANDED_IDS}) AS stranded"
DATABASE_SETTINGS = {
    # Shards per distributed table. Citus's default (32) multiplies every DDL
    # statement by 32 per table; 16 still gives a rebalance several shards to
    # move per worker on a small cluster.
    "citus.shard_count": "16",
    # A unit's SET LOCAL (lock_timeout, statement_timeout) reaches the workers
    # its statements run on; without it a lock wait there ignores the timeout.
    "citus.propagate_set_commands": "local",
    # Per-database counts of the statements the coordinator sent to workers
    # (citus_stat_counters): how an operator, and handoff bench citus, sees
    # how many round trips a call costs. Counting is a few increments per query.
    "citus.enable_stat_counters": "on",
}


def worker_name(worker: int) -> str:
    return f"citus-worker-{worker}"


def socket_dir(home: Path) -> Path:
    """The nodes' private socket folder: short (a socket path has a 107-byte limit),
    one per stack home."""
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"handoff-citus-{digest}"


class CitusNode(Postgres):
    """The coordinator (``postgres``, node 1) or a worker (``citus-worker-N``)."""

    def __init__(
        self,
        layout: Layout,
        state: StackState,
        console: Console,
        citus_bin: Callable[[], Path],
        worker: int = 0,
    ) -> None:
        super().__init__(layout, state, console, node=1)
        self.worker = worker
        self.citus_bin = citus_bin  # found or built when the node is prepared
        if worker:
            self.name = worker_name(worker)

    @property
    def port(self) -> int:
        if not self.worker:
            return self.state.ports.postgres
        preferred = self.layout.settings.postgres_port + 10 + self.worker  # 15443, 15444
        return self.layout.port(self.state, self.name, preferred)

    @property
    def sockets(self) -> Path:
        return socket_dir(self.layout.home)

    def hosts(self) -> list[str]:
        return [self.address()]

    def role(self) -> str | None:
        return "worker" if self.worker else "coordinator"

    def prepare(self) -> None:
        # pg_ctl's stop and status need no Citus; initdb and the server do.
        self.bin = self.citus_bin()
        super().prepare()
        self.sockets.mkdir(mode=0o700, exist_ok=True)
        self.sockets.chmod(0o700)
        if (user := self._os_user()) is not None:
            info = pwd.getpwnam(user)
            os.chown(self.sockets, info.pw_uid, info.pw_gid)

    def _write_conf(self) -> None:
        super()._write_conf()
        with (self.data / "handoff.conf").open("a") as conf:
            conf.write(
                "\n".join(
                    [
                        "shared_preload_libraries = 'citus'",
                        f"unix_socket_directories = '{self.sockets}'",
                        # Shard moves copy with logical replication while writes go on.
                        "wal_level = logical",
                        "max_replication_slots = 20",
                        "max_wal_senders = 20",
                        # Writes to reference tables (services) commit on every node
                        # with two-phase commit.
                        "max_prepared_transactions = 100",
                        # A shard split (isolate_tenant_to_new_shard) connects to its own
                        # node by this name: by the private socket folder, as the nodes
                        # reach each other (not localhost over TCP, which needs a password).
                        f"citus.local_hostname = '{self.sockets}'",
                        "citus.log_remote_commands = off",
                        *self._output_plugins(),
                        "",
                    ]
                )
            )

    def _output_plugins(self) -> list[str]:
        """Citus decodes a moving shard's changes with its own output plugin; servers that
        list the plugins a replication user may name (output_plugin_libraries, new in
        PostgreSQL 18.6) must list it, or a move or split fails. Older ones lack the
        setting, and an unknown one stops the server: asked of the binary first."""
        described = subprocess.run(
            [str(self.bin / "postgres"), "--describe-config"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        for line in described.stdout.splitlines():
            name, *rest = line.split("\t")
            if name == "output_plugin_libraries" and len(rest) >= 4:
                listed = [p.strip() for p in rest[3].split(",") if p.strip()]
                return [f"output_plugin_libraries = '{', '.join([*listed, 'citus'])}'"]
        return []

    def node_url(self, database: str) -> str:
        """A superuser's URL to this node alone (over TCP, with the password)."""
        s = self.state.secrets
        return f"postgresql://postgres:{s.postgres}@{self.address()}/{database}"


class CitusCluster:
    """The coordinator and its workers, as one database to bootstrap."""

    def __init__(self, coordinator: CitusNode, workers: list[CitusNode]) -> None:
        self.coordinator, self.workers = coordinator, workers

    @property
    def nodes(self) -> list[CitusNode]:
        return [self.coordinator, *self.workers]

    def bootstrap(self) -> None:
        """Databases, the extension, the workers, then the roles (idempotent; why the order:
        the module's docstring)."""
        for node in self.nodes:
            with psycopg.connect(node.node_url("postgres"), autocommit=True) as conn:
                if conn.execute(DATABASE_EXISTS, (APP_DB,)).fetchone() is None:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(APP_DB)))
            with psycopg.connect(node.node_url(APP_DB), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
        s = self.coordinator.state.secrets
        with psycopg.connect(self.coordinator.node_url(APP_DB), autocommit=True) as conn:
            self._join(conn)
            for role, password, extra in (
                (APP_ROLE, s.handoff, sql.SQL("CREATEROLE")),
                (REGISTRY_ROLE, s.registry, sql.SQL("")),
            ):
                verb = "ALTER" if conn.execute(ROLE_EXISTS, (role,)).fetchone() else "CREATE"
                conn.execute(
                    sql.SQL("{} ROLE {} LOGIN {} PASSWORD {}").format(
                        sql.SQL(verb), sql.Identifier(role), extra, sql.Literal(password)
                    )
                )
            if conn.execute(ROLE_EXISTS, (SERVICE_GROUP,)).fetchone() is None:
                group = sql.Identifier(SERVICE_GROUP)
                conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(group))
            # On a lone server the app role creates the group and so administers
            # it; here the superuser did, so the app role is given that right.
            conn.execute(
                sql.SQL("GRANT {} TO {} WITH ADMIN OPTION").format(
                    sql.Identifier(SERVICE_GROUP), sql.Identifier(APP_ROLE)
                )
            )
            conn.execute(
                sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                    sql.Identifier(APP_DB), sql.Identifier(APP_ROLE)
                )
            )
            for setting, value in DATABASE_SETTINGS.items():
                conn.execute(
                    sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                        sql.Identifier(APP_DB),
                        sql.Identifier(*setting.split(".")),
                        sql.Literal(value),
                    )
                )
        self._check_propagated()
        # The registry's storage is an ordinary database on the coordinator.
        with psycopg.connect(self.coordinator.node_url("postgres"), autocommit=True) as conn:
            if conn.execute(DATABASE_EXISTS, (REGISTRY_DB,)).fetchone() is None:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(REGISTRY_DB), sql.Identifier(REGISTRY_ROLE)
                    )
                )

    def _join(self, conn: psycopg.Connection[Any]) -> None:
        """The coordinator in the metadata (reference tables get a copy there), then each
        worker, by the private socket folder."""
        here = str(self.coordinator.sockets)
        known = {
            (str(name), int(port)): group
            for name, port, group in conn.execute(
                "SELECT nodename, nodeport, groupid FROM pg_dist_node"
            ).fetchall()
        }
        if (here, self.coordinator.port) not in known:
            conn.execute("SELECT citus_set_coordinator_host(%s, %s)", (here, self.coordinator.port))
        self._forget_stranded(conn)
        grantors = [row[0] for row in conn.execute(GRANTORS).fetchall()]
        administered = conn.execute(ADMINISTERED).fetchall()
        for worker in self.workers:
            if (here, worker.port) not in known:
                self.coordinator.console.print(f"Adding {worker.name} to the Citus cluster…")
                self._make_grantors(worker, grantors, administered)
                conn.execute("SELECT citus_add_node(%s, %s)", (here, worker.port))
                if conn.execute(HAS_SCHEMA).fetchone() is not None:
                    self._make_wakeup_flag(worker)

    def _forget_stranded(self, conn: psycopg.Connection[Any]) -> None:
        """Cleanup records of a worker removed before its leftovers were dropped (by a
        Handoff before remove() waited for them) are deleted: that worker's data went
        with it, and while a record stays, Citus refuses to move its shard again."""
        stranded = conn.execute(
            f"DELETE FROM pg_dist_cleanup c WHERE c.record_id IN ({STRANDED_IDS})"
        ).rowcount
        if stranded:
            self.coordinator.console.print(
                f"Forgot {stranded} Citus cleanup record(s) of workers removed earlier "
                "(their shards can move again)."
            )

    @staticmethod
    def _make_wakeup_flag(worker: CitusNode) -> None:
        """A worker joining a cluster that has Handoff's schema gets its relay wake-up flag
        now (as handoff db upgrade makes it), owned by the app role: an emit on a worker
        without one fails, and a shard may move there before anyone runs the upgrade."""
        with psycopg.connect(worker.node_url(APP_DB)) as conn:
            conn.execute(WAKEUP_FLAG)
            conn.execute(
                sql.SQL("ALTER TABLE handoff.relay_wakeup OWNER TO {}").format(
                    sql.Identifier(APP_ROLE)
                )
            )  # committed as the connection closes

    @staticmethod
    def _make_grantors(
        worker: CitusNode, grantors: list[str], administered: list[tuple[str, str]]
    ) -> None:
        """A worker joining a cluster that has roles gets them from Citus in the order of
        its metadata, not of their grants: a service whose membership the app role granted
        can come before the app role, or before its right to grant the group, and fail
        ("role handoff does not exist"). So the grantors and the groups they administer
        are made here first, by name; Citus then alters each role to what it is."""
        with psycopg.connect(worker.node_url(APP_DB), autocommit=True) as conn:
            for role in {*grantors, *(group for group, _ in administered)}:
                if conn.execute(ROLE_EXISTS, (role,)).fetchone() is None:
                    conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
            for group, member in administered:
                conn.execute(
                    sql.SQL("GRANT {} TO {} WITH ADMIN OPTION").format(
                        sql.Identifier(group), sql.Identifier(member)
                    )
                )

    def remove(self, worker: CitusNode) -> None:
        """Moves every shard off ``worker`` (online: logical replication, writes wait only
        for each switch), then takes it out of the cluster's metadata."""
        here = str(self.coordinator.sockets)
        with psycopg.connect(self.coordinator.node_url(APP_DB), autocommit=True) as conn:
            known = conn.execute(
                "SELECT 1 FROM pg_dist_node WHERE nodename = %s AND nodeport = %s",
                (here, worker.port),
            ).fetchone()
            if known is None:
                return  # removed before (an earlier run stopped after this step)
            conn.execute("SELECT citus_drain_node(%s, %s)", (here, worker.port))
            self._drop_orphans(conn, worker)
            conn.execute("SELECT citus_remove_node(%s, %s)", (here, worker.port))

    def _drop_orphans(self, conn: psycopg.Connection[Any], worker: CitusNode) -> None:
        """The shards a drain moved off ``worker`` dropped there before it leaves.

        Why wait: a move leaves its source shard behind for a deferred drop, and
        Citus skips (forever) a cleanup record whose node group no longer has a
        node, while refusing any later move of that shard while a record for it
        exists ("orphaned shard ... could not be cleaned up"). Removing the node
        with records pending would pin those shards where they are for good."""
        here = str(self.coordinator.sockets)
        deadline = time.monotonic() + ORPHAN_DROP_TIMEOUT_S
        while True:
            conn.execute("CALL citus_cleanup_orphaned_resources()")
            row = conn.execute(ORPHANS_ON_NODE, (here, worker.port)).fetchone()
            left = int(row[0]) if row else 0
            if left == 0:
                return
            if time.monotonic() > deadline:
                raise StackError(
                    f"{worker.name} still has {left} orphaned shard(s) Citus could not drop "
                    f"after {ORPHAN_DROP_TIMEOUT_S:.0f} s (a transaction there holds a lock on "
                    f"them?); it stays in the cluster, drained. Removing it now would block "
                    f"every later move of those shards. See {worker.log}; run handoff stack "
                    f"up again to retry."
                )
            time.sleep(1.0)

    def _check_propagated(self) -> None:
        """Every worker has the app role and owns nothing by accident: a half-propagated
        bootstrap fails here, not in the first migration."""
        for worker in self.workers:
            with psycopg.connect(worker.node_url(APP_DB), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT datdba::regrole::text FROM pg_database WHERE datname = %s", (APP_DB,)
                ).fetchone()
                has_group = conn.execute(ROLE_EXISTS, (SERVICE_GROUP,)).fetchone()
            if row is None or row[0] != APP_ROLE or has_group is None:
                raise StackError(
                    f"{worker.name} did not receive the roles and ownership from the "
                    f"coordinator (owner {row[0] if row else '?'}); see {worker.log} and "
                    f"{self.coordinator.log}"
                )

    def stranded_cleanups(self) -> int:
        """Cleanup records left for a node that is gone (none, when removals waited)."""
        with psycopg.connect(self.coordinator.node_url(APP_DB), autocommit=True) as conn:
            row = conn.execute(STRANDED_CLEANUPS).fetchone()
        return int(row[0]) if row else 0

    def workers_active(self) -> int:
        """Workers the coordinator's metadata lists as active primaries."""
        with psycopg.connect(self.coordinator.node_url(APP_DB), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_dist_node WHERE groupid <> 0 AND isactive"
                " AND noderole = 'primary'"
            ).fetchone()
        return int(row[0]) if row else 0
