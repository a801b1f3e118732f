"""Named statements of the services table family (credentials and their lifecycle)."""

from __future__ import annotations

from psycopg import sql

# CREATE ROLE takes no bind parameters; the verifier is a scram-sha-256
# hash made client-side, so the secret itself never reaches the server.
CREATE_SERVICE_ROLE = sql.SQL(
    "CREATE ROLE {role} LOGIN PASSWORD {verifier} IN ROLE handoff_service"
)

# Rotation sets the password whatever the service set for itself meanwhile
# (a role may always run ALTER ROLE <itself> PASSWORD), and LOGIN again after
# a revocation: the new credential works both ways, the old one neither.
SET_ROLE_PASSWORD = sql.SQL("ALTER ROLE {role} LOGIN PASSWORD {verifier}")

# A service role cannot give itself LOGIN back: that needs CREATEROLE.
DISABLE_ROLE_LOGIN = sql.SQL("ALTER ROLE {role} NOLOGIN")

DROP_SERVICE_ROLE = sql.SQL("DROP ROLE {role}")

# pg_terminate_backend needs the privileges of the target role. The admin
# created it (so holds ADMIN OPTION) and may grant itself membership; roles
# created before PostgreSQL 16's createrole_self_grant need this too.
JOIN_SERVICE_ROLE = sql.SQL("GRANT {role} TO CURRENT_USER")

# Open sessions of a rotated, revoked or removed credential end now, rather
# than whenever their pool recycles them.
TERMINATE_SESSIONS = """
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
  FROM pg_stat_activity WHERE usename = %(role)s AND pid <> pg_backend_pid()
"""

# The web UI's sessions of a service (migration 0014): rotation and revocation end
# them at once; removal by the foreign key's cascade.
END_UI_SESSIONS = """
DELETE FROM handoff.ui_sessions WHERE tenant_id = %(tenant)s AND service = %(name)s
"""

INSERT_SERVICE = """
INSERT INTO handoff.services (tenant_id, name, can_create, db_role, secret_hash)
VALUES (%(tenant)s, %(name)s, %(can_create)s, %(role)s, %(secret_hash)s)
"""

FIND_SERVICE = """
SELECT tenant_id, name, can_create, db_role, created_at
  FROM handoff.services WHERE tenant_id = %(tenant)s AND name = %(name)s
"""

FIND_ACTIVE_CREDENTIAL = """
SELECT tenant_id, name FROM handoff.services
 WHERE db_role = %(role)s AND secret_hash = %(secret_hash)s AND revoked_at IS NULL
"""

# Assigned documents come from the owner counters (O(shards)), not a scan.
# Column names are the fields of services.ServiceInfo. A join with the counts
# summed per owner rather than a subquery per service: on Citus (services a
# reference table) a correlated subquery over a distributed table is refused.
LIST_SERVICES = """
SELECT s.tenant_id AS tenant, s.name, s.can_create, s.db_role AS role, s.created_at,
       s.rotated_at, s.revoked_at, coalesce(c.assigned, 0)::bigint AS assigned
  FROM handoff.services s
  LEFT JOIN (SELECT tenant_id, owner, sum(assigned) AS assigned FROM handoff.owner_counts
              WHERE %(tenant)s::text IS NULL OR tenant_id = %(tenant)s
              GROUP BY tenant_id, owner) c
         ON c.tenant_id = s.tenant_id AND c.owner = s.name
 WHERE %(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s
 ORDER BY s.tenant_id, s.name
"""

ROTATE_SECRET = """
UPDATE handoff.services SET secret_hash = %(secret_hash)s, rotated_at = now(), revoked_at = NULL
 WHERE tenant_id = %(tenant)s AND name = %(name)s
RETURNING db_role
"""

# least(), not coalesce(revoked_at, now()), keeps the first revocation's time: Citus
# refuses a non-immutable function inside COALESCE or CASE in a write.
REVOKE_SERVICE = """
UPDATE handoff.services SET revoked_at = least(revoked_at, now())
 WHERE tenant_id = %(tenant)s AND name = %(name)s
RETURNING db_role
"""

# Waits for every in-flight handoff to this service (they hold the lock
# shared, see handoff._emit in contract.sql) and keeps new ones out until commit.
# Two statements for Citus, where a delegated emit takes it on the tenant's worker
# and one inside a consumer's unit on the coordinator (by_tenant.sql says how);
# on one server the second is the same lock again. No emit takes both, so the
# order cannot deadlock.
LOCK_SERVICE_WHERE_EMITS_RUN = "SELECT handoff.lock_service_for(%(tenant)s, %(name)s)"
LOCK_SERVICE_EXCLUSIVE = "SELECT pg_advisory_xact_lock(handoff._service_lock(%(tenant)s, %(name)s))"

LOCK_SERVICE_ROW = """
SELECT db_role FROM handoff.services WHERE tenant_id = %(tenant)s AND name = %(name)s FOR UPDATE
"""

# Exact, through the ByOwner index; after the exclusive lock, so no handoff
# to this service can commit between this count and the delete.
OWNED_DOCUMENTS = """
SELECT count(*) FROM handoff.document_state WHERE tenant_id = %(tenant)s AND owner = %(name)s
"""

DELETE_SERVICE = """
DELETE FROM handoff.services WHERE tenant_id = %(tenant)s AND name = %(name)s
"""
