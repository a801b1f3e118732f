"""Statements of the projection family: an isolated latest-state table per rebuild.

Each rebuild has its own schema, ``handoff_projection_<name>``, built here
with identifiers, never with string formatting of names.
"""

from __future__ import annotations

from psycopg import sql

SCHEMA_PREFIX = "handoff_projection_"
READERS = sql.Identifier("handoff_read")  # the readers' schema; its view is switched


def schema(name: str) -> sql.Identifier:
    return sql.Identifier(SCHEMA_PREFIX + name)


def create(name: str) -> sql.Composed:
    s = schema(name)
    return sql.SQL("""
CREATE SCHEMA {s};
CREATE TABLE {s}.documents (
    tenant_id    text        NOT NULL,
    document_id  text        NOT NULL,
    run_id       integer     NOT NULL,
    version      integer     NOT NULL,
    event_id     text        NOT NULL,
    owner        text,
    status       text        NOT NULL,
    assigned_at  timestamptz,
    due_at       timestamptz,
    completed_at timestamptz,
    data         jsonb       NOT NULL,
    occurred_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, document_id, run_id)
);
CREATE TABLE {s}.rebuild (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    topic       text        NOT NULL,
    tenant_id   text,
    ends        jsonb       NOT NULL,   -- partition -> offset the rebuild read up to
    events      bigint      NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    differences bigint      -- of the last comparison; NULL until compared
);
""").format(s=s)


def record_start(name: str) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {s}.rebuild (topic, tenant_id, ends) VALUES (%(topic)s, %(tenant)s, %(ends)s)"
    ).format(s=schema(name))


# Highest version wins: an event older than what the row holds changes nothing.
def upsert(name: str) -> sql.Composed:
    return sql.SQL("""
INSERT INTO {s}.documents AS d (tenant_id, document_id, run_id, version, event_id, owner, status,
                               assigned_at, due_at, completed_at, data, occurred_at)
VALUES (%(tenant_id)s, %(document_id)s, %(run_id)s, %(version)s, %(event_id)s, %(owner)s,
        %(status)s, %(assigned_at)s, %(due_at)s, %(completed_at)s, %(data)s, %(occurred_at)s)
ON CONFLICT (tenant_id, document_id, run_id) DO UPDATE
   SET version = EXCLUDED.version, event_id = EXCLUDED.event_id, owner = EXCLUDED.owner,
       status = EXCLUDED.status, assigned_at = EXCLUDED.assigned_at, due_at = EXCLUDED.due_at,
       completed_at = EXCLUDED.completed_at, data = EXCLUDED.data,
       occurred_at = EXCLUDED.occurred_at
 WHERE EXCLUDED.version > d.version
""").format(s=schema(name))


def finish(name: str) -> sql.Composed:
    return sql.SQL("UPDATE {s}.rebuild SET events = %(events)s, finished_at = now()").format(
        s=schema(name)
    )


# Per tenant and owner ('' for finished): documents in each.
def counts(name: str) -> sql.Composed:
    return sql.SQL("""
WITH p AS (
    SELECT tenant_id, coalesce(owner, '') AS owner, count(*)::bigint AS n FROM {s}.documents
     WHERE %(tenant)s::text IS NULL OR tenant_id = %(tenant)s GROUP BY 1, 2
), a AS (
    SELECT tenant_id, coalesce(owner, '') AS owner, count(*)::bigint AS n
      FROM handoff.document_state
     WHERE %(tenant)s::text IS NULL OR tenant_id = %(tenant)s GROUP BY 1, 2
)
SELECT tenant_id, owner, coalesce(p.n, 0) AS projected, coalesce(a.n, 0) AS authoritative
  FROM p FULL JOIN a USING (tenant_id, owner)
 ORDER BY 1, 2
""").format(s=schema(name))


# Documents whose projected latest state is not the authoritative one.
def differences(name: str) -> sql.Composed:
    return sql.SQL("""
SELECT tenant_id, document_id, run_id,
       p.version AS projected_version, a.version AS authoritative_version,
       p.owner AS projected_owner, a.owner AS authoritative_owner,
       p.status AS projected_status, a.status AS authoritative_status
  FROM (SELECT * FROM {s}.documents
         WHERE %(tenant)s::text IS NULL OR tenant_id = %(tenant)s) p
  FULL JOIN (SELECT * FROM handoff.document_state
              WHERE %(tenant)s::text IS NULL OR tenant_id = %(tenant)s) a
       USING (tenant_id, document_id, run_id)
 WHERE p.version IS DISTINCT FROM a.version OR p.owner IS DISTINCT FROM a.owner
    OR p.status IS DISTINCT FROM a.status OR p.data IS DISTINCT FROM a.data
 ORDER BY 1, 2, 3
""").format(s=schema(name))


def set_differences(name: str) -> sql.Composed:
    return sql.SQL("UPDATE {s}.rebuild SET differences = %(n)s").format(s=schema(name))


def state(name: str) -> sql.Composed:
    return sql.SQL(
        "SELECT topic, tenant_id, ends, events, started_at, finished_at, differences "
        "FROM {s}.rebuild"
    ).format(s=schema(name))


# Readers that read handoff_read.documents move to this projection at once.
def switch(name: str) -> sql.Composed:
    return sql.SQL("""
CREATE SCHEMA IF NOT EXISTS {r};
CREATE OR REPLACE VIEW {r}.documents AS SELECT * FROM {s}.documents;
COMMENT ON VIEW {r}.documents IS {note};
""").format(r=READERS, s=schema(name), note=sql.Literal(f"projection {name}"))


def drop(name: str) -> sql.Composed:
    return sql.SQL("DROP SCHEMA {s} CASCADE").format(s=schema(name))


LIST = """
SELECT substr(nspname, length('handoff_projection_') + 1) AS name FROM pg_namespace
 WHERE nspname LIKE 'handoff\\_projection\\_%' ORDER BY 1
"""

CURRENT = """
SELECT obj_description(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'handoff_read' AND c.relname = 'documents'
"""

REPEATABLE_READ = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"

EXISTS = "SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s"
