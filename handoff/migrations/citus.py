"""Handoff on Citus: where each table lives, and the one step that puts it there.

``handoff db upgrade`` runs the revisions as on any PostgreSQL, then, when the
database has the ``citus`` extension, ``distribute`` (idempotent): a table
not yet placed is placed as decided below, and every Handoff function is
propagated to every node. The revisions stay the same for one server and
for Citus; this module is the only place that knows the difference. A table
that no decision names stops the upgrade on Citus (and fails
tests/integration/test_migrations.py everywhere): a new table needs one.

The decisions (docs/scaling.md explains them for operators):

- **Distributed by ``tenant_id``, co-located** with ``document_state``: every
  table of a tenant's work. An emit, a consumer's unit and an effect each
  touch one tenant, so each stays on one worker, a one-node transaction (no
  two-phase commit), and a delegated function call runs there whole.
- **Reference** (a copy on every node): ``services``, read by every call to
  know who the session is (on the worker a delegated call runs on, without
  a network hop), and ``retention``, the settings every node's purge reads.
  Writes to them commit on every node (two-phase commit); both change rarely.
- **On the coordinator** (plain or Citus-local tables): the operator's and
  the UI's tables, read and written there only, low in volume: UI sessions,
  replay plans, DynamoDB import progress, the lag sampler's lease, the flow
  fold's bookkeeping, and the relay's cursors.
- **The relay's marks, on Citus only**: the outbox gets back the
  ``published_at`` column that one server replaced with per-slot bounds
  (0019). A bound needs one sequence and one server's transaction ids to
  prove that no late commit lies below it; on Citus a tenant's rows take ids
  from the sequence of whichever node runs the insert (a worker's own range,
  or the coordinator's), and a shard move carries them to a node whose ids
  and xids they have nothing in common with. A mark belongs to the row and
  moves with it. ``outbox_pending`` becomes the unmarked rows, so every
  reader of the backlog stays as it is (handoff/relay/relay.py, "On Citus").
  The tracker's flow fold, which reads the outbox by id the same way, marks
  the rows it folded too (``folded_at``; tracker.sql, _fold_flow_marked).
- **On every node, its own** (a plain table made on each worker too):
  ``relay_wakeup``, the flag an emit reads to know whether a relay waits for
  a NOTIFY on the node the emit runs on. A delegated emit runs on a worker and
  a worker cannot read a coordinator's table inside it; each node's relay
  listener sets its own node's flag.

Delegation: the entry points that name their tenant (handoff/sql/by_tenant.sql)
are distributed with the tenant as their distribution argument, co-located with
``document_state``, and forced: a call is handed whole to the worker that holds
the tenant, outside a transaction (one round trip, one local transaction there)
and inside a consumer's unit (one round trip each, on the session's one
connection to that worker, so the unit commits on one node).

Keys: Citus needs a distributed table's unique keys to include ``tenant_id``.
The tables whose key is a bare identity ``id`` get ``(tenant_id, id)`` here,
plus an index on ``id`` for the operator's lookups by id (those go to every
shard); ``effect_intents``' idempotency key becomes unique per tenant (the
key is built from the tenant, so nothing that was unique stops being so);
the audit tables' foreign keys to them gain ``tenant_id``.
"""

from __future__ import annotations

from typing import Any

from handoff.core import outbox_sql

ANCHOR = "document_state"

DISTRIBUTED = (
    "document_state",
    "document_history",
    "owner_counts",
    "owner_due_counts",
    "owner_samples",
    "receipts",
    "rejections",
    "outbox",
    "consumer_guards",
    "consumer_deliveries",
    "consumer_parked",
    "consumer_lag",
    "quarantine",
    "quarantine_audit",
    "effect_intents",
    "effect_history",
    "flow_edges",
    "flow_minutes",
    "workflow_runs",
)
REFERENCE = ("services", "retention")
COORDINATOR = (
    "ui_sessions",
    "ui_form_uses",
    "replay_plans",
    "replay_items",
    "replay_audit",
    "replay_skipped",
    "import_progress",
    "lag_sampler",
    "flow_fold",
    "flow_gaps",
    "relay_cursors",
)
NODE_LOCAL = ("relay_wakeup",)

# Entry points handed to the worker of their tenant by their tenant argument (each names
# it p_tenant), also inside an explicit transaction (force_delegation): a consumer's unit
# and a service's removal. by_tenant.sql says why a unit needs it.
DELEGATED = (
    "emit_direct_for", "emit_http_for", "lock_service_for", "consumer_begin_for",
    "consumer_claim_for", "consumer_claim_one_for", "consumer_hold_for", "consumer_take_for",
    "effect_intend_for", "workflow_start_for", "emit_direct_or_raise_for", "effect_claim_for",
    "effect_submitting_for", "effect_record_for", "effect_release_for",
)  # fmt: skip

# Before distribution: unique keys and foreign keys that name the tenant.
KEYS = """
ALTER TABLE handoff.quarantine_audit DROP CONSTRAINT quarantine_audit_quarantine_id_fkey;
ALTER TABLE handoff.effect_history DROP CONSTRAINT effect_history_intent_id_fkey;
ALTER TABLE handoff.rejections DROP CONSTRAINT rejections_pkey, ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE handoff.outbox DROP CONSTRAINT outbox_pkey, ADD PRIMARY KEY (tenant_id, id);
CREATE INDEX outbox_by_id ON handoff.outbox (id);
ALTER TABLE handoff.quarantine DROP CONSTRAINT quarantine_pkey, ADD PRIMARY KEY (tenant_id, id);
CREATE INDEX quarantine_by_id ON handoff.quarantine (id);
ALTER TABLE handoff.quarantine_audit DROP CONSTRAINT quarantine_audit_pkey,
    ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE handoff.consumer_parked DROP CONSTRAINT consumer_parked_pkey,
    ADD PRIMARY KEY (tenant_id, id);
CREATE INDEX consumer_parked_by_id ON handoff.consumer_parked (id);
ALTER TABLE handoff.effect_intents DROP CONSTRAINT effect_intents_pkey,
    ADD PRIMARY KEY (tenant_id, id);
CREATE INDEX effect_intents_by_id ON handoff.effect_intents (id);
ALTER TABLE handoff.effect_intents DROP CONSTRAINT effect_intents_idempotency_key_key,
    ADD CONSTRAINT effect_intents_idempotency_key_key UNIQUE (tenant_id, idempotency_key);
ALTER TABLE handoff.effect_history DROP CONSTRAINT effect_history_pkey,
    ADD PRIMARY KEY (tenant_id, id);
"""

# After distribution (co-located tables may refer to each other by tenant and key).
FOREIGN_KEYS = """
ALTER TABLE handoff.quarantine_audit ADD CONSTRAINT quarantine_audit_quarantine_id_fkey
    FOREIGN KEY (tenant_id, quarantine_id) REFERENCES handoff.quarantine (tenant_id, id)
    ON DELETE CASCADE;
ALTER TABLE handoff.effect_history ADD CONSTRAINT effect_history_intent_id_fkey
    FOREIGN KEY (tenant_id, intent_id) REFERENCES handoff.effect_intents (tenant_id, id)
    ON DELETE CASCADE;
"""

# The relay's marks (see the decisions above); idempotent, after distribution, so
# that each statement is propagated to every shard. The pending index walks
# unmarked rows in id order and tests the slot inside it, as 0001's did; the
# second finds a document's earlier unmarked rows (the relay's order check).
MARKS = """
ALTER TABLE handoff.outbox ADD COLUMN IF NOT EXISTS published_at timestamptz;
ALTER TABLE handoff.outbox ADD COLUMN IF NOT EXISTS folded_at timestamptz;
CREATE INDEX IF NOT EXISTS outbox_unfolded ON handoff.outbox (tenant_id, id)
    WHERE folded_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_unmarked ON handoff.outbox (id, slot)
    WHERE published_at IS NULL AND parked_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_unmarked_by_document
    ON handoff.outbox (tenant_id, document_id, run_id, version)
    WHERE published_at IS NULL AND parked_at IS NULL;
CREATE OR REPLACE VIEW handoff.outbox_pending AS
SELECT o.* FROM handoff.outbox o WHERE o.published_at IS NULL AND o.parked_at IS NULL
"""
HAS_MARKS = """
SELECT 1 FROM pg_attribute
 WHERE attrelid = 'handoff.outbox'::regclass AND attname IN ('published_at', 'folded_at')
   AND NOT attisdropped
HAVING count(*) = 2
"""

HAS_CITUS = "SELECT 1 FROM pg_extension WHERE extname = 'citus'"
READER_LOGS_IN = "SELECT 1 FROM pg_roles WHERE rolname = 'handoff_reader' AND rolcanlogin"
TABLES = """
SELECT c.relname FROM pg_class c
 WHERE c.relnamespace = 'handoff'::regnamespace AND c.relkind IN ('r', 'p')
   AND NOT c.relispartition
"""
PLACED = """
SELECT c.relname FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
 WHERE c.relnamespace = 'handoff'::regnamespace
"""
# Every Handoff function, on every node: a function delegated to a worker runs
# there, with whatever it calls. A function replaced later is propagated by
# Citus itself once it is distributed.
_UNPROPAGATED = """
  FROM pg_proc p
 WHERE p.pronamespace = 'handoff'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM pg_dist_object o
                    WHERE o.classid = 'pg_proc'::regclass AND o.objid = p.oid)
"""
UNPROPAGATED = "SELECT count(*)" + _UNPROPAGATED
PROPAGATE = "SELECT create_distributed_function(p.oid::regprocedure)" + _UNPROPAGATED
_UNDELEGATED = f"""
  FROM pg_proc p JOIN pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
 WHERE p.pronamespace = 'handoff'::regnamespace
   AND (o.distribution_argument_index IS NULL OR NOT coalesce(o.force_delegation, false))
   AND p.proname IN ({", ".join(f"'{name}'" for name in DELEGATED)})
"""
UNDELEGATED = "SELECT count(*)" + _UNDELEGATED
DELEGATE = (
    "SELECT create_distributed_function(p.oid::regprocedure, 'p_tenant',"
    " colocate_with => 'handoff.document_state', force_delegation => true)" + _UNDELEGATED
)
# The wake-up flag on each worker, made as on the coordinator (0001_contract) and
# owned by the same role; idempotent, so a worker added later gets it at the next
# `handoff db upgrade`.
WAKEUP_ON_WORKERS = f"""
SELECT bool_and(success), string_agg(DISTINCT result, '; ') FILTER (WHERE NOT success)
  FROM run_command_on_workers($cmd${outbox_sql.WAKEUP_FLAG}$cmd$)
"""


def undecided(tables: set[str]) -> set[str]:
    """Tables of the schema that no decision above names."""
    return tables - {*DISTRIBUTED, *REFERENCE, *COORDINATOR, *NODE_LOCAL}


def distribute(conn: Any) -> list[str]:
    """Place every Handoff table as decided, on a database with Citus; what it did.

    ``conn`` is a DB-API-like connection inside a transaction (SQLAlchemy's
    ``exec_driver_sql`` or psycopg's ``execute``). A database without Citus
    is left as it is (an empty answer).
    """
    run = getattr(conn, "exec_driver_sql", None) or conn.execute
    if run(HAS_CITUS).fetchone() is None:
        return []
    tables = {row[0] for row in run(TABLES).fetchall()}
    if missing := undecided(tables):
        raise RuntimeError(
            f"no Citus decision for handoff.{', handoff.'.join(sorted(missing))}: "
            "name each in handoff/migrations/citus.py"
        )
    done: list[str] = []
    placed = {row[0] for row in run(PLACED).fetchall()}
    # Distribution copies rows and makes shards one table after another; the
    # sequential mode keeps later DDL in this transaction legal after that.
    run("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    # The deadline counters' trigger updates a co-located table of the same
    # tenant (safe on a shard); Citus refuses triggers unless told so.
    run("SET LOCAL citus.enable_unsafe_triggers TO on")
    for table in REFERENCE:
        if table not in placed:
            run(f"SELECT create_reference_table('handoff.{table}')")
            done.append(f"{table}: reference table")
    if ANCHOR not in placed:
        for statement in _statements(KEYS):
            run(statement)
        done.append("keys: tenant_id in every unique key of a distributed table")
    for table in DISTRIBUTED:
        if table in placed:
            continue
        colocate = "" if table == ANCHOR else f", colocate_with => 'handoff.{ANCHOR}'"
        run(f"SELECT create_distributed_table('handoff.{table}', 'tenant_id'{colocate})")
        done.append(f"{table}: distributed by tenant_id")
    if ANCHOR not in placed:
        for statement in _statements(FOREIGN_KEYS):
            run(statement)
    if run(HAS_MARKS).fetchone() is None:
        for statement in _statements(MARKS):
            run(statement)
        done.append("outbox: the relay and the flow fold mark the rows they took")
    if run(READER_LOGS_IN).fetchone() is None:
        # The tracker reads as handoff_reader (SET LOCAL ROLE), and Citus opens its
        # connections to the workers as the session's role. It has no password, so
        # no client can log in as it over TCP; the nodes reach each other through
        # their private socket folder (handoff/stack/citus.py).
        run("ALTER ROLE handoff_reader LOGIN")
        done.append("handoff_reader may open the coordinator's connections to the workers")
    if functions := run(UNPROPAGATED).fetchone()[0]:
        run(PROPAGATE)
        done.append(f"{functions} functions propagated to every node")
    if delegated := run(UNDELEGATED).fetchone()[0]:
        run(DELEGATE)
        done.append(f"{delegated} entry points delegated to the worker of their tenant")
    if run(outbox_sql.WORKERS_WITHOUT_WAKEUP).fetchone()[0]:
        made, failure = run(WAKEUP_ON_WORKERS).fetchone()
        if not made:
            raise RuntimeError(f"could not make handoff.relay_wakeup on a worker: {failure}")
        done.append("relay_wakeup: one on every worker")
    return done


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
