"""PostgreSQL of the local stack is a real server with real authentication."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from handoff.core.settings import HandoffSettings


def test_table_round_trip(pg: psycopg.Connection) -> None:
    table = f"roundtrip_{uuid.uuid4().hex[:8]}"
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, body jsonb NOT NULL)")
    try:
        rows = [(i, psycopg.types.json.Jsonb({"n": i, "s": "é" * i})) for i in range(50)]
        with pg.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", rows)
        pg.commit()
        got = pg.execute(f"SELECT id, body FROM {table} ORDER BY id").fetchall()
        assert [(i, body["n"], body["s"]) for i, body in got] == [
            (i, i, "é" * i) for i in range(50)
        ]
    finally:
        pg.rollback()
        pg.execute(f"DROP TABLE {table}")
        pg.commit()


def test_server_is_postgresql_over_tcp(pg: psycopg.Connection) -> None:
    version = pg.execute("SHOW server_version_num").fetchone()
    assert version is not None and int(version[0]) >= 170000
    addr = pg.execute("SELECT inet_server_addr()::text").fetchone()
    assert addr is not None and addr[0].startswith("127.0.0.1")


def test_wrong_password_is_refused(settings: HandoffSettings) -> None:
    # scram-sha-256 on every TCP login: per-service roles depend on it.
    user_and_rest = settings.database_url.split("://", 1)[1]
    host_part = user_and_rest.split("@", 1)[1]
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(f"postgresql://handoff:not-the-password@{host_part}", connect_timeout=5)
