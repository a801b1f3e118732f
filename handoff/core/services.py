"""Registering services: a PostgreSQL role and a credential per (tenant, service)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from pydantic import TypeAdapter

from handoff.core.db import translated
from handoff.core.errors import ServiceExists
from handoff.core.identity import Credential
from handoff.core.models import ServiceName
from handoff.core.services_sql import CREATE_SERVICE_ROLE, FIND_SERVICE, INSERT_SERVICE

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
