"""Services and their credentials: add, list, rotate, revoke, remove.

Each (tenant, service) has a PostgreSQL role and one credential that works
both ways (HTTP bearer token, database login). Every lifecycle step changes
both sides in one transaction, so the two never disagree for long: rotation
and revocation also override a password the service set on its own role.
The connection's role needs CREATEROLE (the admin role of the stack).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from handoff.core import services_sql as q
from handoff.core.db import translated
from handoff.core.errors import InvalidRequest, ServiceExists, ServiceInUse, ServiceNotFound
from handoff.core.identity import Credential
from handoff.core.names import service_name_problem

Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class ServiceInfo:
    tenant: str
    name: str
    can_create: bool
    role: str
    created_at: datetime
    rotated_at: datetime | None
    revoked_at: datetime | None
    assigned: int
    """Documents this service owns now."""


def _check_name(what: str, value: str) -> None:
    problem = service_name_problem(value)
    if problem is not None:
        raise InvalidRequest(f"{what} {value!r} {problem}")


def _check_names(name: str, tenant: str) -> dict[str, str]:
    """The statements' key parameters, after checking both against the naming rule."""
    _check_name("service name", name)
    _check_name("tenant", tenant)
    return {"tenant": tenant, "name": name}


def _verifier(conn: Conn, credential: Credential) -> sql.Literal:
    verifier = conn.pgconn.encrypt_password(
        credential.secret.encode(), credential.role.encode(), b"scram-sha-256"
    )
    return sql.Literal(verifier.decode())


def _end_sessions(conn: Conn, role: str) -> int:
    with conn.transaction(), translated(sent=False):
        conn.execute(q.JOIN_SERVICE_ROLE.format(role=sql.Identifier(role)))
        row = conn.execute(q.TERMINATE_SESSIONS, {"role": role}).fetchone()
    return int(row[0]) if row else 0


def add_service(
    conn: Conn, name: str, *, tenant: str = "default", can_create: bool = False
) -> Credential:
    """Register a service and return its credential (shown once; only a hash is kept).

    Runs in one transaction: the role, its membership and the services row
    appear together or not at all.
    """
    key = _check_names(name, tenant)
    credential = Credential.new()
    with conn.transaction(), translated(sent=False):
        if conn.execute(q.FIND_SERVICE, key).fetchone():
            raise ServiceExists(f"service {name!r} already exists in tenant {tenant!r}")
        conn.execute(
            q.CREATE_SERVICE_ROLE.format(
                role=sql.Identifier(credential.role), verifier=_verifier(conn, credential)
            )
        )
        conn.execute(
            q.INSERT_SERVICE,
            {
                **key,
                "can_create": can_create,
                "role": credential.role,
                "secret_hash": credential.secret_hash,
            },
        )
    return credential


def list_services(conn: Conn, tenant: str | None = None) -> list[ServiceInfo]:
    """Every service (of one tenant, or all), with what it owns now."""
    if tenant is not None:
        _check_name("tenant", tenant)
    with translated(sent=False), conn.cursor(row_factory=class_row(ServiceInfo)) as cur:
        return cur.execute(q.LIST_SERVICES, {"tenant": tenant}).fetchall()


def has_credential(conn: Conn, credential: Credential, tenant: str) -> bool:
    """Whether ``credential`` is the current, unrevoked credential of a service of ``tenant``."""
    with translated(sent=False):
        row = conn.execute(
            q.FIND_ACTIVE_CREDENTIAL,
            {"role": credential.role, "secret_hash": credential.secret_hash},
        ).fetchone()
    return row is not None and row[0] == tenant


def rotate_service(conn: Conn, name: str, *, tenant: str = "default") -> Credential:
    """A new secret for both ways at once; the old one stops working, open sessions end.

    Also lifts a revocation: rotating is how a revoked service comes back.
    """
    key = _check_names(name, tenant)
    with conn.transaction(), translated(sent=False):
        row = conn.execute(q.FIND_SERVICE, key).fetchone()
        if row is None:
            raise ServiceNotFound(f"no service {name!r} in tenant {tenant!r}")
        credential = Credential(row[3], Credential.new().secret)
        conn.execute(q.ROTATE_SECRET, {**key, "secret_hash": credential.secret_hash})
        conn.execute(q.END_UI_SESSIONS, key)  # the web UI's too (they would fail anyway)
        conn.execute(
            q.SET_ROLE_PASSWORD.format(
                role=sql.Identifier(credential.role), verifier=_verifier(conn, credential)
            )
        )
    # After the commit: a session ended earlier could log in again with the
    # old password before the new one took effect.
    _end_sessions(conn, credential.role)
    return credential


def revoke_service(conn: Conn, name: str, *, tenant: str = "default") -> int:
    """Block the credential both ways at once; answers how many open sessions were ended.

    The service stays registered (work may still be handed to it and waits);
    ``rotate_service`` issues a new credential and lifts the revocation.
    """
    key = _check_names(name, tenant)
    with conn.transaction(), translated(sent=False):
        row = conn.execute(q.REVOKE_SERVICE, key).fetchone()
        if row is None:
            raise ServiceNotFound(f"no service {name!r} in tenant {tenant!r}")
        conn.execute(q.DISABLE_ROLE_LOGIN.format(role=sql.Identifier(row[0])))
        conn.execute(q.END_UI_SESSIONS, key)
    # After the commit (see rotate). Sessions that stay open are refused
    # anyway: the emit and read functions check revoked_at on every call.
    return _end_sessions(conn, row[0])


def remove_service(conn: Conn, name: str, *, tenant: str = "default") -> None:
    """Unregister a service that owns no documents; its credential stops working at once."""
    key = _check_names(name, tenant)
    with conn.transaction(), translated(sent=False):
        conn.execute(q.LOCK_SERVICE_WHERE_EMITS_RUN, key)
        conn.execute(q.LOCK_SERVICE_EXCLUSIVE, key)
        row = conn.execute(q.LOCK_SERVICE_ROW, key).fetchone()
        if row is None:
            raise ServiceNotFound(f"no service {name!r} in tenant {tenant!r}")
        owned = conn.execute(q.OWNED_DOCUMENTS, key).fetchone()
        if owned and owned[0]:
            raise ServiceInUse(
                f"service {name!r} still owns {owned[0]} document(s) in tenant {tenant!r}; "
                "hand them on or finish them first (revoke stops its credential meanwhile)"
            )
        conn.execute(q.DELETE_SERVICE, key)
        # Before the commit, while the role still exists to be signalled. A
        # session that logs in again meanwhile finds no service at its next
        # call, and any assignment to it waits on the lock, then is refused.
        _end_sessions(conn, row[0])
        conn.execute(q.DROP_SERVICE_ROLE.format(role=sql.Identifier(row[0])))
