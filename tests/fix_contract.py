"""Pytest plugin: services, clients and a real API server for the emit contract.

Every test gets its own tenant, so tests never see each other's documents,
counts or rejections, and the database never needs wiping.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from handoff.core.client import HandoffClient
from handoff.core.identity import Credential
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from handoff.stack.migrate import upgrade
from handoff.stack.procs import wait_until

BACKENDS = ("direct", "http")


@pytest.fixture(scope="session")
def migrated(settings: HandoffSettings) -> HandoffSettings:
    upgrade(settings)
    return settings


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def admin(migrated: HandoffSettings) -> Iterator[psycopg.Connection[Any]]:
    """The API/admin role, autocommit: for registering services and checking invariants."""
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        yield conn


ServiceFactory = Callable[..., Credential]


@pytest.fixture
def service(admin: psycopg.Connection[Any], tenant: str) -> ServiceFactory:
    def make(name: str, *, can_create: bool = False, in_tenant: str | None = None) -> Credential:
        return add_service(admin, name, tenant=in_tenant or tenant, can_create=can_create)

    return make


def answers_healthz(url: str) -> bool:
    """Whether the server at ``url`` answers 200 on /healthz now (not listening: False)."""
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def serving(
    stack: LocalStack, name: str, args: list[str], *, port: int, timeout_s: float = 30, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m handoff.cli <args>`` until its /healthz answers on ``port``; stopped after."""
    log = stack.layout.log_file(name)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "handoff.cli", *args],
            env={**os.environ, "HANDOFF_HOME": str(stack.layout.home), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def healthy() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        return answers_healthz(f"http://127.0.0.1:{port}")

    try:
        if not wait_until(healthy, timeout_s):
            pytest.fail(f"{name} did not become healthy; see {log}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(15)


@pytest.fixture(scope="session")
def api_url(migrated: HandoffSettings, local_stack: LocalStack) -> Iterator[str]:
    """A real ``handoff serve`` process on a free port."""
    port = pick_port(18500, set())
    # The UI refreshes every second here, so the browser test waits little.
    with serving(
        local_stack, "test-api", ["serve", "--port", str(port)], port=port,
        HANDOFF_TRACKER_REFRESH_S="1", HANDOFF_TRACKER_LAG_INTERVAL_S="1",
    ):  # fmt: skip
        yield f"http://127.0.0.1:{port}"


ClientFactory = Callable[[Credential], HandoffClient]


@pytest.fixture(params=BACKENDS)
def connect(request: pytest.FixtureRequest, migrated: HandoffSettings) -> Iterator[ClientFactory]:
    """Build clients for the backend under test; closes them afterwards."""
    made: list[HandoffClient] = []

    def factory(credential: Credential) -> HandoffClient:
        if request.param == "direct":
            client = HandoffClient.direct(credential, migrated.database_url, pool_size=2)
        else:
            client = HandoffClient.http(request.getfixturevalue("api_url"), credential)
        made.append(client)
        return client

    yield factory
    for client in made:
        client.close()


@contextmanager
def signed_in(url: str, credential: Credential, **options: Any) -> Iterator[httpx.Client]:
    """A client signed in to the web UI as ``credential``, the way a browser does it:
    the sign-in page first (its form carries the sign-in's CSRF token), then the form."""
    with httpx.Client(base_url=url, timeout=options.pop("timeout", 15), **options) as client:
        page = client.get("/signin")
        fields = dict(re.findall(r'name="([a-z_]+)" value="([^"]*)"', page.text))
        answer = client.post("/signin", data={**fields, "credential": credential.token})
        assert answer.status_code == 303, f"sign-in: {answer.status_code} {answer.text[:300]}"
        yield client


def post(
    url: str, path: str, body: object, token: str | None = None, **headers: str
) -> httpx.Response:
    """POST JSON to the API, as the credential ``token`` names (if any)."""
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=10)


def login(settings: HandoffSettings, role: str, password: str) -> psycopg.Connection[Any]:
    """A direct database session as a service's own role (autocommit)."""
    return psycopg.connect(
        make_conninfo(settings.database_url, user=role, password=password), autocommit=True
    )


def counts(admin: psycopg.Connection[Any], tenant: str) -> dict[str, int]:
    """Per-owner assigned counts, shards summed; owners at zero left out."""
    rows = admin.execute(
        "SELECT owner, sum(assigned) FROM handoff.owner_counts WHERE tenant_id = %s "
        "GROUP BY owner HAVING sum(assigned) <> 0",
        (tenant,),
    ).fetchall()
    return {owner: int(total) for owner, total in rows}


# Hours before ``now`` are "past" on both sides: the tracker folds the counters of
# passed hours into one -infinity row (handoff.fold_due_counts) whenever a server's
# job runs, and the invariant holds across a fold as long as the past is compared
# as one bucket.
_HOUR = "CASE WHEN {b} < handoff._due_bucket(%(now)s) THEN 'past' ELSE {b}::text END"


def due_counts(
    admin: psycopg.Connection[Any], tenant: str, now: Any = None
) -> dict[tuple[str, str], int]:
    """Deadline counters per (owner, hour, past hours as one), shards summed; zero sums
    left out."""
    rows = admin.execute(
        f"SELECT owner, {_HOUR.format(b='due_hour')}, sum(n) FROM handoff.owner_due_counts "
        "WHERE tenant_id = %(tenant)s GROUP BY 1, 2 HAVING sum(n) <> 0",
        {"tenant": tenant, "now": now or _db_now(admin)},
    ).fetchall()
    return {(owner, hour): int(n) for owner, hour, n in rows}


def due_counts_by_scan(
    admin: psycopg.Connection[Any], tenant: str, now: Any = None
) -> dict[tuple[str, str], int]:
    """The same from the state table: what the counters must equal."""
    rows = admin.execute(
        f"SELECT owner, {_HOUR.format(b='handoff._due_bucket(due_at)')}, count(*) "
        "FROM handoff.document_state WHERE tenant_id = %(tenant)s AND owner IS NOT NULL "
        "AND due_at IS NOT NULL GROUP BY 1, 2",
        {"tenant": tenant, "now": now or _db_now(admin)},
    ).fetchall()
    return {(owner, hour): int(n) for owner, hour, n in rows}


def due_counts_both(admin: psycopg.Connection[Any], tenant: str) -> tuple[Any, Any]:
    """Counters and scan at one instant (an hour may end between two statements)."""
    now = _db_now(admin)
    return due_counts(admin, tenant, now), due_counts_by_scan(admin, tenant, now)


def _db_now(admin: psycopg.Connection[Any]) -> Any:
    row = admin.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def deadlocks(admin: psycopg.Connection[Any]) -> int:
    """Deadlocks the server has detected in this database (statistics flush within ~1 s)."""
    time.sleep(1.2)
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def owner_and_version(conn: psycopg.Connection[Any], tenant: str, document: str) -> tuple[Any, int]:
    """The committed owner (None once finished) and version of a document's latest run."""
    row = conn.execute(
        "SELECT owner, version FROM handoff.document_state "
        "WHERE tenant_id = %s AND document_id = %s ORDER BY run_id DESC LIMIT 1",
        (tenant, document),
    ).fetchone()
    assert row is not None, f"{document} does not exist"
    return row[0], int(row[1])


@pytest.fixture
def fresh_database(local_stack: LocalStack, migrated: HandoffSettings) -> Iterator[str]:
    """A new, empty database owned by the app role; dropped afterwards with its roles."""
    name = f"fresh_{uuid.uuid4().hex[:8]}"
    superuser = local_stack.postgres.superuser_url()
    app = conninfo_to_dict(migrated.database_url)
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(str(app["user"]))
            )
        )
    try:
        yield _as_url(make_conninfo(migrated.database_url, dbname=name))
    finally:
        with psycopg.connect(make_conninfo(superuser, dbname=name), autocommit=True) as db:
            held = db.execute("SELECT to_regclass('handoff.services')").fetchone()
            roles = (
                []
                if held is None or held[0] is None
                else [r[0] for r in db.execute("SELECT db_role FROM handoff.services").fetchall()]
            )
        with psycopg.connect(superuser, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            for role in roles:
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _as_url(conninfo: str) -> str:
    p = conninfo_to_dict(conninfo)
    return f"postgresql://{p['user']}:{p['password']}@{p['host']}:{p['port']}/{p['dbname']}"
