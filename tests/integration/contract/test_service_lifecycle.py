"""Credentials with a lifecycle: list, rotate, revoke, remove, both ways at once.

A service role may run ALTER ROLE <itself> PASSWORD and so make its database
login drift from its HTTP secret; rotation and revocation must still win.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest

from handoff.core.client import HandoffClient
from handoff.core.errors import ServiceInUse, ServiceNotFound
from handoff.core.identity import Credential
from handoff.core.services import list_services, remove_service, revoke_service, rotate_service
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack
from tests.fix_contract import ServiceFactory, login

EMIT = "SELECT handoff.emit_direct(%s, %s, %s, %s, NULL, NULL, %s, %s, %s, NULL, NULL, NULL, NULL)"


def http_works(api_url: str, credential: Credential) -> bool:
    answer = httpx.get(
        api_url + "/v1/owners", headers={"Authorization": f"Bearer {credential.token}"}
    )
    assert answer.status_code in (200, 401), answer.text
    return answer.status_code == 200


def login_works(settings: HandoffSettings, role: str, password: str) -> bool:
    try:
        with login(settings, role, password) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def session_alive(conn: psycopg.Connection[Any]) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def test_rotation_changes_both_ways_and_wins_over_a_self_set_password(
    migrated: HandoffSettings,
    service: ServiceFactory,
    admin: psycopg.Connection[Any],
    api_url: str,
    tenant: str,
) -> None:
    old = service("worker", can_create=True)
    # the service drifts its own database password away from its HTTP secret
    with login(migrated, old.role, old.secret) as conn:
        conn.execute(f"ALTER ROLE {old.role} PASSWORD 'drifted-by-the-service'")
    assert login_works(migrated, old.role, "drifted-by-the-service")
    assert http_works(api_url, old)
    lingering = login(migrated, old.role, "drifted-by-the-service")

    new = rotate_service(admin, "worker", tenant=tenant)

    assert new.role == old.role and new.secret != old.secret
    assert not http_works(api_url, old)
    assert not login_works(migrated, old.role, old.secret)
    assert not login_works(migrated, old.role, "drifted-by-the-service")
    assert not session_alive(lingering), "a session of the old credential outlived rotation"
    lingering.close()
    assert http_works(api_url, new) and login_works(migrated, new.role, new.secret)
    with HandoffClient.direct(new, migrated.database_url, pool_size=1) as client:
        assert (
            client.create(event_id="e1", document_id="d1", owner="worker", status="s").version == 1
        )


def test_revocation_blocks_both_ways_at_once_and_rotation_lifts_it(
    migrated: HandoffSettings,
    service: ServiceFactory,
    admin: psycopg.Connection[Any],
    api_url: str,
    tenant: str,
) -> None:
    cred = service("worker", can_create=True)
    service("next")
    open_session = login(migrated, cred.role, cred.secret)

    ended = revoke_service(admin, "worker", tenant=tenant)

    assert ended == 1
    assert not http_works(api_url, cred)
    assert not login_works(migrated, cred.role, cred.secret)
    assert not session_alive(open_session)
    open_session.close()
    # work can still be handed to a revoked service: it waits, visible
    sender = service("sender", can_create=True)
    with HandoffClient.direct(sender, migrated.database_url, pool_size=1) as client:
        assert client.create(event_id="e", document_id="d", owner="worker", status="s").owner
    listed = {s.name: s for s in list_services(admin, tenant)}
    assert listed["worker"].revoked_at is not None and listed["worker"].assigned == 1

    back = rotate_service(admin, "worker", tenant=tenant)
    assert http_works(api_url, back) and login_works(migrated, back.role, back.secret)
    assert not http_works(api_url, cred)


def test_a_session_that_survives_revocation_is_refused_per_call(
    migrated: HandoffSettings, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    # Defence in depth: if ending the session failed, the emit function still
    # refuses a revoked service on every call.
    cred = service("worker", can_create=True)
    with login(migrated, cred.role, cred.secret) as conn:
        admin.execute(
            "UPDATE handoff.services SET revoked_at = now() WHERE tenant_id = %s AND name = %s",
            (tenant, "worker"),
        )
        with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match="revoked"):
            conn.execute(EMIT, ("create", "e", "created", "d", "worker", "s", None))


def test_removal_is_refused_while_the_service_owns_documents(
    migrated: HandoffSettings,
    service: ServiceFactory,
    admin: psycopg.Connection[Any],
    api_url: str,
    tenant: str,
) -> None:
    boss = service("boss", can_create=True)
    worker = service("worker")
    with HandoffClient.direct(boss, migrated.database_url, pool_size=1) as client:
        client.create(event_id="e1", document_id="d1", owner="worker", status="s")
    with pytest.raises(ServiceInUse, match="owns 1 document"):
        remove_service(admin, "worker", tenant=tenant)
    with HandoffClient.direct(worker, migrated.database_url, pool_size=1) as client:
        client.emit(
            event_id="e2", event_type="done", document_id="d1", next_owner=None,
            status="done", expected_version=1,
        )  # fmt: skip
    remove_service(admin, "worker", tenant=tenant)
    assert "worker" not in {s.name for s in list_services(admin, tenant)}
    assert not http_works(api_url, worker)
    assert not login_works(migrated, worker.role, worker.secret)
    with pytest.raises(ServiceNotFound):
        remove_service(admin, "worker", tenant=tenant)


def test_a_handoff_racing_a_removal_is_never_stranded(
    migrated: HandoffSettings, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    boss = service("boss", can_create=True)
    service("worker")
    outcome: dict[str, Any] = {}
    with login(migrated, boss.role, boss.secret) as conn:
        conn.autocommit = False
        answer = conn.execute(EMIT, ("create", "e1", "created", "d1", "worker", "s", None))
        assert answer.fetchone()[0]["accepted"]  # type: ignore[index]

        def remove() -> None:
            with psycopg.connect(migrated.database_url, autocommit=True) as other:
                try:
                    remove_service(other, "worker", tenant=tenant)
                    outcome["removed"] = True
                except ServiceInUse as exc:
                    outcome["refused"] = str(exc)

        remover = threading.Thread(target=remove)
        remover.start()
        time.sleep(1.0)
        assert remover.is_alive(), "removal did not wait for the in-flight handoff"
        conn.commit()
        remover.join(10)
    assert outcome == {"refused": outcome.get("refused")} and "owns 1 document" in str(outcome)


def test_the_cli_lists_rotates_revokes_and_removes(
    local_stack: LocalStack, migrated: HandoffSettings, api_url: str
) -> None:
    tenant = f"t-cli-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "HANDOFF_HOME": str(local_stack.layout.home), "COLUMNS": "300"}

    def handoff(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "handoff.cli", *args],
            env=env, check=False, capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    added = handoff("service", "add", "worker", "--tenant", tenant)
    assert added.returncode == 0, added.stderr
    first = Credential.parse(added.stdout.strip().splitlines()[-1])
    listed = handoff("service", "list", "--tenant", tenant)
    assert listed.returncode == 0 and "worker" in listed.stderr and first.role in listed.stderr
    rotated = handoff("service", "rotate", "worker", "--tenant", tenant)
    assert rotated.returncode == 0, rotated.stderr
    second = Credential.parse(rotated.stdout.strip().splitlines()[-1])
    assert http_works(api_url, second) and not http_works(api_url, first)
    unconfirmed = handoff("service", "revoke", "worker", "--tenant", tenant)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    assert http_works(api_url, second)
    revoked = handoff("service", "revoke", "worker", "--tenant", tenant, "--yes")
    assert revoked.returncode == 0 and not http_works(api_url, second)
    assert "revoked" in handoff("service", "list", "--tenant", tenant).stderr
    removed = handoff("service", "remove", "worker", "--tenant", tenant, "--yes")
    assert removed.returncode == 0, removed.stderr
    missing = handoff("service", "rotate", "worker", "--tenant", tenant)
    assert missing.returncode == 1 and "ServiceNotFound" in missing.stderr
