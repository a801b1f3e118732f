"""Named statements of the outbox family, as the relay uses them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg.adapt import Dumper
from psycopg.postgres import adapters as postgres

# The relay's session, and the wake-up channel.
#
# One server: the fetch is a generic plan, made once (psycopg prepares a
# statement at its fifth run) and seq scans priced out. Planned anew on every
# fetch, as it was with force_custom_plan, its planning took more than its
# run (0.9 of 1.7 ms, EXPLAIN ANALYZE), and in a hop run at 100 handoffs/s
# the relay's backend was the busiest process on the machine (0.31 core, the
# next one 0.19). A generic plan does not know how few rows pass "id > $1"
# and guesses a third: it then scans the whole outbox (published rows stay
# for their retention window) and sorts it; without seq scans it is the
# primary key's range scan at any size (as for the per-event functions,
# 0018_index_plans). Every relay statement is a keyed lookup or a range.
# The ids left out are a hashed subplan, which a generic plan keeps
# (FETCH_PENDING).
#
# On Citus every statement is planned with its values, by which Citus routes
# it (it refused generic plans of the effect functions, 0026_effect_plans).
#
# Asynchronous commits: everything the relay writes (published marks, parks,
# the wake-up flag, purges) may be lost in a crash of PostgreSQL itself
# without harm, because a lost mark only means the row is published again,
# which a crash of the relay between ack and mark already does (consumers'
# guards absorb it). WAL is written in order, so a lost mark loses every later
# mark too and the rows go out again in their order. In return the database
# thread does not wait for a WAL flush (or a synchronous standby) after every
# batch before it fetches the next.
SESSION_SETUP = (
    "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off;"
    " SET synchronous_commit = off"
)
CITUS_SESSION_SETUP = "SET plan_cache_mode = force_custom_plan; SET synchronous_commit = off"
LISTEN = "LISTEN handoff_outbox"
# On Citus the relay marks rows instead of moving bounds (the statements at the end).
# The wake-up flag of one Citus worker, made as on the coordinator (0001_contract);
# idempotent. handoff db upgrade runs it on every worker as the app role, and the
# local stack on a worker that joins a cluster which has the schema.
WAKEUP_FLAG = """
CREATE TABLE IF NOT EXISTS handoff.relay_wakeup (
    id      boolean PRIMARY KEY DEFAULT true CHECK (id),
    waiting boolean NOT NULL DEFAULT false);
INSERT INTO handoff.relay_wakeup DEFAULT VALUES ON CONFLICT DO NOTHING
"""
# Each worker has a wake-up flag of its own (made by handoff db upgrade); the
# workers that lack it, where an emit would fail:
WORKERS_WITHOUT_WAKEUP = """
SELECT count(*) FROM run_command_on_workers(
    $cmd$SELECT to_regclass('handoff.relay_wakeup') IS NOT NULL$cmd$)
 WHERE NOT success OR result <> 't'
"""

# Advisory-lock class of the relay's slots: (RELAY_LOCK_CLASS, slot).
RELAY_LOCK_CLASS = 0x48_4F_46_46  # "HOFF"
# Every relay session also holds (RELAY_MEMBER_CLASS, its backend pid), so a
# relay that owns no slot yet still counts when the others compute a fair share.
RELAY_MEMBER_CLASS = 0x48_4F_46_4D  # "HOFM"

JOIN = "SELECT pg_advisory_lock(%(cls)s, pg_backend_pid())"

TRY_LOCK_SLOT = "SELECT pg_try_advisory_lock(%(cls)s, %(slot)s)"
UNLOCK_SLOT = "SELECT pg_advisory_unlock(%(cls)s, %(slot)s)"

RELAYS_ALIVE = """
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = %(cls)s AND granted AND database = (
       SELECT oid FROM pg_database WHERE datname = current_database())
"""

SLOTS_HELD_BY_OTHERS = """
SELECT objid::int FROM pg_locks
 WHERE locktype = 'advisory' AND classid = %(cls)s AND granted AND pid <> pg_backend_pid()
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

# Oldest first: within one document, id order is version order. Rows of
# owned slots above their slot's bound (%(bounds)s, indexed by slot + 1; a
# slot the relay does not own has the largest bigint), leaving out those
# already fetched and not yet below the bound (%(seen)s). Those are "NOT IN
# (SELECT unnest(...))", a subplan PostgreSQL hashes once per fetch: "<> ALL"
# of an array parameter compares every row with every id in a generic plan
# (251 against 45 ms a fetch with 20,000 ids left out, measured), and the ids
# are many while an open transaction holds the bound.
#
# A row of a document that has an earlier parked row comes with that row's id
# (held_behind): the relay parks it too, so that the slot's bound can pass it.
# That lookup must go through the partial index of parked rows, whatever the
# statistics the generic plan was made on. Written plainly (min(p.id), p.id <
# o.id), a plan made while the outbox was empty and analysed (a new install,
# everything purged) took the primary key instead, min() as "the first id
# upwards that is a parked row of this document": for a document with none,
# every older row of the outbox, for every row fetched. The relay kept that
# plan while the outbox grew, its fetches took seconds and rows waited up to
# 11 s (handoff bench relay, the run after a 1M-row drain). "+ 0" leaves the
# primary key nothing to serve: no order for min(), no range for the "<".
#
# The statement's own snapshot's xmin comes with it (the fetch sees exactly
# what it says), the next transaction id to be assigned and the last outbox id
# handed out, both read after that snapshot was taken (handoff/relay/cursor.py
# proves bounds from them); when %(lockers)s, the holders of the outbox's
# insert lock (read only then: pg_locks costs about 80 us). Always one row.
#
# Why not the snapshot's xmax: it is the latest completed xid + 1, and a
# transaction that got a higher xid may still be running. The next xid is
# read without taking one: age() of a transaction without an xid counts from
# it (32 bits; widened here with the snapshot's 64-bit xmax, which it is
# never below and never 2^32 above).
FETCH_PENDING = """
SELECT s.xmin, s.xmax + ((d.next32 - s.xmax) %% 4294967296 + 4294967296) %% 4294967296,
       s.last_id,
       CASE WHEN %(lockers)s THEN (
           SELECT coalesce(array_agg(virtualtransaction), '{}') FROM pg_locks
            WHERE locktype = 'relation' AND relation = 'handoff.outbox'::regclass
              AND mode = 'RowExclusiveLock' AND pid IS DISTINCT FROM pg_backend_pid())
       END,
       f.id, f.tenant_id, f.document_id, f.version, f.event_type, f.payload, f.held_behind,
       f.traceparent
  FROM (SELECT pg_snapshot_xmin(x)::text::bigint AS xmin,
               pg_snapshot_xmax(x)::text::bigint AS xmax,
               (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END
                  FROM handoff.outbox_id_seq) AS last_id
          FROM pg_current_snapshot() AS x) AS s
 CROSS JOIN (SELECT datfrozenxid::text::bigint + age(datfrozenxid) AS next32
               FROM pg_database WHERE datname = current_database()) AS d
  LEFT JOIN LATERAL (
       SELECT o.id, o.tenant_id, o.document_id, o.version, o.event_type, o.payload,
              (SELECT min(p.id + 0) FROM handoff.outbox p
                WHERE p.parked_at IS NOT NULL AND p.tenant_id = o.tenant_id
                  AND p.document_id = o.document_id AND p.id + 0 < o.id) AS held_behind,
              o.traceparent
         FROM handoff.outbox o
        WHERE o.id > %(after)s
          AND o.id > (%(bounds)s::bigint[])[o.slot + 1]
          AND o.parked_at IS NULL
          AND o.id NOT IN (SELECT unnest(%(seen)s::bigint[]))
        ORDER BY o.id
        LIMIT %(limit)s) AS f ON true
 ORDER BY f.id
"""

# The bound of each owned slot, as the last relay that owned it left it.
BOUNDS = """
SELECT slot, published_upto FROM handoff.relay_cursors WHERE slot = ANY(%(slots)s)
"""

# Moves the owned slots' bound up (never down: a slot whose bound is already
# higher was left there by an earlier owner). One HOT update per slot.
ADVANCE = """
UPDATE handoff.relay_cursors SET published_upto = %(upto)s, moved_at = now()
 WHERE slot = ANY(%(slots)s) AND published_upto < %(upto)s
"""

# With its tenant: on Citus, the one shard that holds it.
PARK = """
UPDATE handoff.outbox SET parked_at = now(), park_reason = %(reason)s
 WHERE tenant_id = %(tenant)s AND id = %(id)s
"""

SET_WAITING = "UPDATE handoff.relay_wakeup SET waiting = true"

# The pending view walks the ids above the lowest bound; parked rows have their
# own small partial index.
BACKLOG = """
SELECT (SELECT count(*) FROM handoff.outbox_pending),
       (SELECT extract(epoch FROM now() - created_at) FROM handoff.outbox_pending
         ORDER BY id LIMIT 1),
       (SELECT count(*) FROM handoff.outbox WHERE parked_at IS NOT NULL)
"""

# Published (at or below the slot's bound, not parked) and created before the
# window: created_at is what BRIN finds without a scan, and a row is published
# after it was created, so the window is never shorter than asked. The longer
# of the relay's own setting and the retention table's outbox window (handoff
# retention): never sooner than either allows.
_CUTOFF = """(SELECT now() - greatest(make_interval(secs => %(seconds)s),
                                     coalesce((SELECT outbox FROM handoff.retention),
                                              interval '0')))"""
_PURGE = """
DELETE FROM handoff.outbox WHERE id IN (
    SELECT o.id FROM handoff.outbox o JOIN handoff.relay_cursors c ON c.slot = o.slot
     WHERE o.created_at < {cutoff} AND o.id <= c.published_upto AND o.parked_at IS NULL
     LIMIT %(limit)s FOR UPDATE OF o SKIP LOCKED)
"""
PURGE = _PURGE.format(cutoff=_CUTOFF)
# The same, before a cutoff the caller gives (handoff retention run).
PURGE_BEFORE = _PURGE.format(cutoff="%(cutoff)s")

# -- handoff relay unpark: a parked document's rows written again -------------------
#
# Under the document's state row lock, so no emit of it interleaves: its rows
# that wait (parked, and any above the slot's bound) are deleted and inserted
# again in id order, so they get new ids above every bound and the relay
# publishes them in their order. The document is named, never guessed.
UNPARK_LOCK = """
SELECT 1 FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND document_id = %(document)s FOR UPDATE
"""
UNPARK = """
WITH waiting AS (
    DELETE FROM handoff.outbox o
     USING handoff.relay_cursors c
     WHERE c.slot = o.slot AND o.tenant_id = %(tenant)s AND o.document_id = %(document)s
       AND (o.parked_at IS NOT NULL OR o.id > c.published_upto)
    RETURNING o.id, o.tenant_id, o.document_id, o.run_id, o.version, o.event_id,
              o.event_type, o.payload, o.created_at, o.parked_at, o.traceparent
), again AS (
    INSERT INTO handoff.outbox (tenant_id, document_id, run_id, version, event_id,
                                event_type, payload, created_at, traceparent)
    SELECT tenant_id, document_id, run_id, version, event_id, event_type, payload, created_at,
           traceparent
      FROM waiting ORDER BY id
    RETURNING 1
)
SELECT (SELECT count(*) FROM waiting WHERE parked_at IS NOT NULL),
       (SELECT count(*) FROM again)
"""


# -- parameter types of these statements ---------------------------------------


class IdArray(str):
    """Outbox ids as PostgreSQL array text, sent typed as bigint[].

    Why: the fetch excludes the ids fetched above the bound (a few batches)
    and sends 256 slot bounds, and psycopg's list dumper walks such lists in
    Python on every fetch. Each batch's ids are joined once, when it is
    fetched; typed as bigint[] (not text cast in SQL), the parameter is an
    array PostgreSQL hashes (in the fetch's subplan on one server; on Citus,
    as the constant of a custom plan).
    """

    @classmethod
    def joined(cls, parts: Iterable[str]) -> IdArray:
        """From already joined runs of ids ("1,2,3")."""
        return cls("{" + ",".join(parts) + "}")

    @classmethod
    def of(cls, ids: Iterable[int]) -> IdArray:
        return cls.joined([str(i) for i in ids])


class IdArrayDumper(Dumper):
    oid = postgres.types["int8"].array_oid

    def dump(self, obj: Any) -> bytes:
        return str(obj).encode()


# The envelope of one accepted event, as the relay would publish it (the
# rehearsal builds its deliveries from it).
EVENT_PAYLOAD = """
SELECT payload FROM handoff.outbox WHERE tenant_id = %(tenant)s AND event_id = %(event_id)s
"""

# handoff outbox parked: what waits for a person, oldest first.
PARKED = """
SELECT id, tenant_id, document_id, version, event_type, parked_at, park_reason
  FROM handoff.outbox
 WHERE parked_at IS NOT NULL AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
 ORDER BY id LIMIT %(limit)s
"""


# -- on Citus: the relay marks what it published -----------------------------------
#
# A bound needs one sequence and one server's transaction ids (relay/cursor.py);
# on Citus neither exists (handoff/migrations/citus.py, "The relay's marks"), so
# each published row is marked, as one server did before 0019. Unmarked rows of
# owned slots, oldest id first, leaving out the rows in flight (%(seen)s).
#
# A document's order is its (run, version). Its ids follow it while one node
# inserts them, and a mark does not care about late commits (a row committed
# late is unmarked, so fetched later, and its document's next version cannot
# commit before it: the state row lock). But ids come from the sequence of the
# node that runs the insert: after a shard move, or an insert through the
# coordinator, a later version may hold a lower id. Such a row waits (NOT
# EXISTS) while an earlier version of its document with a higher id is
# unmarked, so it is never produced before it. Everything runs on the shards
# (the subqueries join on tenant_id): Citus sends one task per shard and merges
# their first rows.
CITUS_FETCH = """
SELECT o.id, o.tenant_id, o.document_id, o.version, o.event_type, o.payload,
       (SELECT min(p.id) FROM handoff.outbox p
         WHERE p.parked_at IS NOT NULL AND p.tenant_id = o.tenant_id
           AND p.document_id = o.document_id
           AND (p.run_id, p.version) < (o.run_id, o.version)) AS held_behind,
       o.traceparent
  FROM handoff.outbox o
 WHERE o.published_at IS NULL AND o.parked_at IS NULL
   AND o.slot = ANY(%(slots)s::smallint[])
   AND o.id <> ALL(%(seen)s::bigint[])
   AND NOT EXISTS (
       SELECT 1 FROM handoff.outbox p
        WHERE p.tenant_id = o.tenant_id AND p.document_id = o.document_id
          AND p.published_at IS NULL AND p.parked_at IS NULL
          AND (p.run_id, p.version) < (o.run_id, o.version) AND p.id > o.id)
 ORDER BY o.id
 LIMIT %(limit)s
"""

# The tenants only route the update to their shards (ids are unique on their own).
CITUS_MARK = """
UPDATE handoff.outbox SET published_at = now()
 WHERE tenant_id = ANY(%(tenants)s::text[]) AND id = ANY(%(ids)s::bigint[])
"""

# Marked and created before the window; every shard at once (Citus runs a
# multi-shard DELETE without LIMIT, one task per shard).
_CITUS_PURGE = """
DELETE FROM handoff.outbox
 WHERE published_at IS NOT NULL AND parked_at IS NULL AND created_at < {cutoff}
"""
CITUS_PURGE = _CITUS_PURGE.format(cutoff=_CUTOFF)
CITUS_PURGE_BEFORE = _CITUS_PURGE.format(cutoff="%(cutoff)s")

# Unparked, a document's rows are unmarked rows again: the fetch takes them
# in their order (no new ids needed: no bound has passed them).
CITUS_UNPARK = """
WITH unparked AS (
    UPDATE handoff.outbox SET parked_at = NULL, park_reason = NULL
     WHERE tenant_id = %(tenant)s AND document_id = %(document)s AND parked_at IS NOT NULL
    RETURNING 1)
SELECT count(*), count(*) FROM unparked
"""
