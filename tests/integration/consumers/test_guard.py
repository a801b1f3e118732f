"""The guard at the SQL edge: concurrent takers, lock timeouts, and the service lockdown."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from handoff.core import HandoffClient, handoff_tx
from handoff.core import guards_sql as guards
from handoff.core.errors import (
    ConfigurationError,
    InvalidRequest,
    TransientConflict,
    UnitRolledBack,
)
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings


def _login(
    settings: HandoffSettings, cred: Credential, *, autocommit: bool = False
) -> psycopg.Connection[Any]:
    info = make_conninfo(settings.database_url, user=cred.role, password=cred.secret)
    return psycopg.connect(info, autocommit=autocommit)


def _params(event_id: str, fingerprint: str = "aa", version: int = 1) -> dict[str, Any]:
    event = {
        "eventId": event_id,
        "fingerprint": fingerprint,
        "documentId": "g",
        "runId": 1,
        "version": version,
    }
    return {"events": Jsonb([event]), "types": ["created"], "owner": None, "reconcile": False}


def _begin(conn: psycopg.Connection[Any], event_id: str, fingerprint: str = "aa") -> str:
    row = conn.execute(guards.VERDICTS, _params(event_id, fingerprint)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def created(
    service: Callable[..., Credential], migrated: HandoffSettings
) -> Iterator[Callable[[str], psycopg.Connection[Any]]]:
    """Document g at version 1, and a login for a consumer service of the tenant."""
    creator = service("creator", can_create=True)
    service("worker")
    with HandoffClient.direct(creator) as c:
        c.create(event_id="g-1", document_id="g", owner="worker", status="new")
    opened: list[psycopg.Connection[Any]] = []
    credentials: dict[str, Credential] = {}

    def login(name: str) -> psycopg.Connection[Any]:
        """A new session of service ``name`` (registered on first use)."""
        if name not in credentials:
            credentials[name] = service(name)
        conn = _login(migrated, credentials[name])
        opened.append(conn)
        return conn

    yield login
    for conn in opened:
        conn.close()


def test_two_takers_of_one_event_at_once_one_applies_the_other_sees_a_duplicate(
    created: Callable[[str], psycopg.Connection[Any]],
) -> None:
    first = created("audit")
    second = created("audit")
    assert _begin(first, "g-1") == "apply"  # uncommitted: the second must wait for it
    verdicts: list[str] = []
    waiter = threading.Thread(target=lambda: verdicts.append(_begin(second, "g-1")))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive(), "the second taker did not wait for the first's guard row"
    first.commit()
    waiter.join(10)
    assert verdicts == ["duplicate"]
    second.rollback()


def test_a_taker_that_rolls_back_leaves_the_event_to_the_next(
    created: Callable[[str], psycopg.Connection[Any]],
) -> None:
    first = created("audit")
    second = created("audit")
    assert _begin(first, "g-1") == "apply"
    verdicts: list[str] = []
    waiter = threading.Thread(target=lambda: verdicts.append(_begin(second, "g-1")))
    waiter.start()
    waiter.join(0.3)
    first.rollback()  # the first taker's effect failed
    waiter.join(10)
    assert verdicts == ["apply"]
    second.rollback()


def test_a_lock_timeout_is_a_transient_conflict_never_a_duplicate(
    created: Callable[[str], psycopg.Connection[Any]],
) -> None:
    first = created("audit")
    second = created("audit")
    assert _begin(first, "g-1") == "apply"
    with handoff_tx(second) as tx, pytest.raises(TransientConflict):
        # SET LOCAL: on Citus it reaches the worker where the wait happens.
        tx.execute("SET LOCAL lock_timeout = '200ms'")
        tx.execute(guards.VERDICTS, _params("g-1"))
    first.rollback()


def test_each_consumer_has_its_own_guard_space_and_service_roles_cannot_touch_the_tables(
    created: Callable[[str], psycopg.Connection[Any]], admin: psycopg.Connection[Any], tenant: str
) -> None:
    audit, billing = created("audit"), created("billing")
    assert _begin(audit, "g-1") == "apply"
    audit.commit()
    assert _begin(billing, "g-1") == "apply"  # another consumer: its own guard row
    billing.commit()
    assert _begin(audit, "g-1", fingerprint="bb") == "conflict"
    audit.rollback()
    owners = admin.execute(
        "SELECT consumer FROM handoff.consumer_guards WHERE tenant_id = %s ORDER BY consumer",
        (tenant,),
    ).fetchall()
    assert owners == [("audit",), ("billing",)]  # named by the session, not by the caller
    for statement in (
        "INSERT INTO handoff.consumer_guards VALUES ('x', 'billing', 'e', '\\x00', 'd', 1, 1)",
        "DELETE FROM handoff.consumer_guards",
        "SELECT * FROM handoff.quarantine",
        "UPDATE handoff.quarantine SET status = 'discarded'",
        "SELECT * FROM handoff.consumer_parked",
        "UPDATE handoff.consumer_guards SET version = 1",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            audit.execute(statement)
        audit.rollback()


# psycopg sends BEGIN (autocommit off), or the unit does, with its first statement.
@pytest.mark.parametrize("autocommit", [False, True], ids=["psycopg-begins", "unit-begins"])
def test_a_unit_rolls_back_unless_committed_and_keeps_a_rejection_it_commits(
    created: Callable[[str], psycopg.Connection[Any]],
    admin: psycopg.Connection[Any],
    tenant: str,
    service: Callable[..., Credential],
    migrated: HandoffSettings,
    autocommit: bool,
) -> None:
    cred = Credential.parse(_rotate(admin, tenant, "worker"))
    worker = _login(migrated, cred, autocommit=autocommit)
    with handoff_tx(worker) as tx:
        receipt = tx.emit(
            event_id="g-2",
            event_type="routed",
            document_id="g",
            next_owner="worker",
            status="busy",
            expected_version=1,
        )
        assert receipt.version == 1 + 1  # type: ignore[union-attr]
    # not committed: gone
    assert admin.execute(
        "SELECT version FROM handoff.document_state WHERE tenant_id = %s", (tenant,)
    ).fetchone() == (1,)
    with handoff_tx(worker) as tx:
        refused = tx.emit(
            event_id="g-x",
            event_type="routed",
            document_id="g",
            next_owner="worker",
            status="late",
            expected_version=7,
        )
        assert refused.code == "VersionMismatch"  # type: ignore[union-attr]
        assert tx.rejections == [refused]
        tx.commit()
        with pytest.raises(ConfigurationError):
            tx.execute("SELECT 1")
    assert admin.execute(
        "SELECT code FROM handoff.rejections WHERE tenant_id = %s AND event_id = 'g-x'", (tenant,)
    ).fetchall() == [("VersionMismatch",)]
    # A failed statement rolls its unit back and leaves the connection ready.
    with pytest.raises(InvalidRequest), handoff_tx(worker) as tx:
        tx.execute("SELECT 1 / 0")
    assert worker.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with handoff_tx(worker) as tx:  # an error caught and ignored: no silent rollback
        with pytest.raises(InvalidRequest):
            tx.execute("SELECT 1 / 0")
        with pytest.raises(UnitRolledBack):
            tx.commit()
    with handoff_tx(worker) as tx:
        assert tx.execute("SELECT 41 + 1").fetchone() == (42,)
        tx.commit()
    assert worker.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    worker.close()


def _rotate(admin: psycopg.Connection[Any], tenant: str, name: str) -> str:
    from handoff.core.services import rotate_service

    return rotate_service(admin, name, tenant=tenant).token


def _one(event_id: str, fingerprint: str = "aa", version: int = 1) -> dict[str, Any]:
    """consumer_claim_one's arguments for an event of document g (as _params)."""
    return {"event_id": event_id, "fingerprint": bytes.fromhex(fingerprint), "document_id": "g",
            "run_id": 1, "version": version, "types": ["created"], "owner": None}  # fmt: skip


def _claim_one(
    conn: psycopg.Connection[Any], event_id: str, fingerprint: str = "aa", version: int = 1
) -> str:
    """consumer_claim_one's answer, in a transaction rolled back after: "apply", or the
    verdict its refusal (SQLSTATE P0H00) names."""
    try:
        conn.execute(guards.CLAIM_ONE, _one(event_id, fingerprint, version))
        return "apply"
    except psycopg.Error as exc:
        assert exc.sqlstate == "P0H00", exc
        return str(exc.diag.message_primary).removeprefix("event not claimed: ")
    finally:
        conn.rollback()


def _verdict(
    conn: psycopg.Connection[Any], event_id: str, fingerprint: str = "aa", version: int = 1
) -> str:
    """consumer_begin's verdict on the same event, in a transaction rolled back after."""
    row = conn.execute(guards.VERDICTS, _params(event_id, fingerprint, version)).fetchone()
    conn.rollback()
    assert row is not None
    return str(row[0])


def test_the_one_event_claim_refuses_what_consumer_begin_would_not_apply(
    created: Callable[[str], psycopg.Connection[Any]],
) -> None:
    conn = created("audit")
    assert _claim_one(conn, "g-1") == "apply" == _verdict(conn, "g-1")
    conn.execute(guards.CLAIM_ONE, _one("g-1"))
    conn.commit()  # g-1 taken: the position is version 1
    cases = {
        "duplicate": ("g-1", "aa", 1),
        "conflict": ("g-1", "bb", 1),  # the same id, another fingerprint
        "stale": ("g-2", "aa", 1),  # another event of the version taken
        "future": ("g-3", "aa", 2),  # a version the database does not hold
    }
    for expected, (event_id, fingerprint, version) in cases.items():
        assert _verdict(conn, event_id, fingerprint, version) == expected
        assert _claim_one(conn, event_id, fingerprint, version) == expected


def test_the_one_event_claim_naming_another_tenant_is_refused_as_an_unknown_service(
    created: Callable[[str], psycopg.Connection[Any]],
) -> None:
    conn = created("audit")
    tenant = conn.execute(guards.WHOAMI).fetchone()
    assert tenant is not None
    one = _one("g-1")
    with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match="not in"):
        conn.execute(guards.CLAIM_ONE_FOR, {**one, "tenant": f"{tenant[0]}-other"})
    conn.rollback()
    conn.execute(guards.CLAIM_ONE_FOR, {**one, "tenant": tenant[0]})  # its own: claimed
    conn.rollback()


def test_the_one_event_claim_refuses_a_session_that_survives_its_revocation(
    created: Callable[[str], psycopg.Connection[Any]], admin: psycopg.Connection[Any]
) -> None:
    # The claim looks the session's service up itself (claim_one.sql): it must
    # refuse a revoked service on every call, as _consumer() does.
    conn = created("audit")
    tenant = conn.execute(guards.WHOAMI).fetchone()
    assert tenant is not None
    conn.execute(guards.CLAIM_ONE, _one("g-1"))  # active: claimed
    conn.rollback()
    admin.execute(
        "UPDATE handoff.services SET revoked_at = now() WHERE tenant_id = %s AND name = 'audit'",
        (tenant[0],),
    )
    with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match="revoked"):
        conn.execute(guards.CLAIM_ONE, _one("g-1"))
    conn.rollback()
    with pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match="revoked"):
        conn.execute(guards.CLAIM_ONE_FOR, {**_one("g-1"), "tenant": tenant[0]})
    conn.rollback()
