"""Named statements of the services table family."""

from __future__ import annotations

from psycopg import sql

# CREATE ROLE takes no bind parameters; the verifier is a scram-sha-256
# hash made client-side, so the secret itself never reaches the server.
CREATE_SERVICE_ROLE = sql.SQL(
    "CREATE ROLE {role} LOGIN PASSWORD {verifier} IN ROLE handoff_service"
)

INSERT_SERVICE = """
INSERT INTO handoff.services (tenant_id, name, can_create, db_role, secret_hash)
VALUES (%(tenant)s, %(name)s, %(can_create)s, %(role)s, %(secret_hash)s)
"""

FIND_SERVICE = """
SELECT tenant_id, name, can_create, db_role, created_at
  FROM handoff.services WHERE tenant_id = %(tenant)s AND name = %(name)s
"""

FIND_SERVICE_BY_ROLE = """
SELECT tenant_id, name FROM handoff.services WHERE db_role = %(role)s
"""

DELETE_SERVICE = """
DELETE FROM handoff.services WHERE tenant_id = %(tenant)s AND name = %(name)s RETURNING db_role
"""

DROP_SERVICE_ROLE = sql.SQL("DROP ROLE {role}")
