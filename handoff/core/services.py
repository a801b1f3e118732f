"""Registering services: a PostgreSQL role and a credential per (tenant, service)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from pydantic import TypeAdapter

from handoff.core.db import translated
from handoff.core.errors import ServiceExists, ServiceNotFound
from handoff.core.identity import Credential
from handoff.core.models import ServiceName
from handoff.core.services_sql import (
    CREATE_SERVICE_ROLE,
    DELETE_SERVICE,
    DROP_SERVICE_ROLE,
    FIND_SERVICE,
    FIND_SERVICE_BY_ROLE,
    INSERT_SERVICE,
)

_service_name: TypeAdapter[str] = TypeAdapter(ServiceName)


def add_service(
    conn: psycopg.Connection[Any], name: str, *, tenant: str = "default", can_create: bool = False
) -> Credential:
    """Register a service and return its credential (shown once; only a hash is kept).

    Runs in one transaction: the role, its membership and the services row
    appear together or not at all. The connection's role needs CREATEROLE.
    """
    _service_name.validate_python(name)
    _service_name.validate_python(tenant)
    credential = Credential.new()
    verifier = conn.pgconn.encrypt_password(
        credential.secret.encode(), credential.role.encode(), b"scram-sha-256"
    )
    with conn.transaction(), translated(sent=False):
        if conn.execute(FIND_SERVICE, {"tenant": tenant, "name": name}).fetchone():
            raise ServiceExists(f"service {name!r} already exists in tenant {tenant!r}")
        conn.execute(
            CREATE_SERVICE_ROLE.format(
                role=sql.Identifier(credential.role), verifier=sql.Literal(verifier.decode())
            )
        )
        conn.execute(
            INSERT_SERVICE,
            {
                "tenant": tenant,
                "name": name,
                "can_create": can_create,
                "role": credential.role,
                "secret_hash": credential.secret_hash,
            },
        )
    return credential


def has_credential(conn: psycopg.Connection[Any], credential: Credential, tenant: str) -> bool:
    """Whether ``credential`` still belongs to a registered service of ``tenant``."""
    with translated(sent=False):
        row = conn.execute(FIND_SERVICE_BY_ROLE, {"role": credential.role}).fetchone()
    return row is not None and row[0] == tenant


def remove_service(conn: psycopg.Connection[Any], name: str, *, tenant: str = "default") -> None:
    """Unregister a service: its credential stops working at once (role dropped)."""
    with conn.transaction(), translated(sent=False):
        row = conn.execute(DELETE_SERVICE, {"tenant": tenant, "name": name}).fetchone()
        if row is None:
            raise ServiceNotFound(f"no service {name!r} in tenant {tenant!r}")
        conn.execute(DROP_SERVICE_ROLE.format(role=sql.Identifier(row[0])))
