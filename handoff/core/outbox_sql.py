"""Named statements of the outbox family, as the relay uses them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg.adapt import Dumper
from psycopg.postgres import adapters as postgres

# The relay's session: custom plans, so that the in-flight id array of
# FETCH_PENDING is a constant PostgreSQL can hash; and the wake-up channel.
#
# Asynchronous commits: everything the relay writes (published marks, parks,
# the wake-up flag, purges) may be lost in a crash of PostgreSQL itself
# without harm, because a lost mark only means the row is published again,
# which a crash of the relay between ack and mark already does (consumers'
# guards absorb it). WAL is written in order, so a lost mark loses every later
# mark too and the rows go out again in their order. In return the database
# thread does not wait for a WAL flush (or a synchronous standby) after every
# batch before it fetches the next.
SESSION_SETUP = "SET plan_cache_mode = force_custom_plan; SET synchronous_commit = off"
LISTEN = "LISTEN handoff_outbox"

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

# Oldest first: within one document, id order is version order. Documents
# with a parked row are held back until the row is repaired or discarded.
# %(in_flight)s: rows of batches still awaiting acks are not fetched twice.
# With custom plans (see the relay's session) the array is a constant, and
# PostgreSQL hashes "<> ALL" instead of comparing every row with every id.
FETCH_PENDING = """
SELECT o.id, o.tenant_id, o.document_id, o.version, o.event_type, o.payload
  FROM handoff.outbox o
 WHERE o.published_at IS NULL AND o.parked_at IS NULL
   AND o.id >= %(floor)s
   AND o.id <> ALL(%(in_flight)s::bigint[])
   AND o.slot = ANY(%(slots)s)
   AND NOT EXISTS (SELECT 1 FROM handoff.outbox p
                    WHERE p.parked_at IS NOT NULL AND p.published_at IS NULL
                      AND p.tenant_id = o.tenant_id AND p.document_id = o.document_id)
 ORDER BY o.id
 LIMIT %(limit)s
"""

# For the fetch floor (relay.py): the last outbox id handed out, and the
# transaction horizon. Once xmin passes an earlier xmax, every row with an id
# handed out before that xmax is committed (visible) or rolled back.
HORIZON = """
SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,
       (SELECT last_value FROM handoff.outbox_id_seq)
  FROM pg_current_snapshot() AS s
"""

MARK_PUBLISHED = "UPDATE handoff.outbox SET published_at = now() WHERE id = ANY(%(ids)s)"

PARK = """
UPDATE handoff.outbox SET parked_at = now(), park_reason = %(reason)s WHERE id = %(id)s
"""

SET_WAITING = "UPDATE handoff.relay_wakeup SET waiting = true"

# Each part reads one small partial index, never the published history.
BACKLOG = """
SELECT (SELECT count(*) FROM handoff.outbox
         WHERE published_at IS NULL AND parked_at IS NULL),
       (SELECT extract(epoch FROM now() - created_at) FROM handoff.outbox
         WHERE published_at IS NULL AND parked_at IS NULL ORDER BY id LIMIT 1),
       (SELECT count(*) FROM handoff.outbox
         WHERE parked_at IS NOT NULL AND published_at IS NULL)
"""

# created_at <= published_at, so the created_at test (BRIN) only narrows.
# The longer of the relay's own setting and the retention table's outbox
# window (handoff retention): never sooner than either allows.
_CUTOFF = """(SELECT now() - greatest(make_interval(secs => %(seconds)s),
                                     coalesce((SELECT outbox FROM handoff.retention),
                                              interval '0')))"""
PURGE = f"""
DELETE FROM handoff.outbox WHERE id IN (
    SELECT id FROM handoff.outbox
     WHERE created_at < {_CUTOFF} AND published_at < {_CUTOFF}
     LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
"""


# -- parameter types of these statements ---------------------------------------


class IdArray(str):
    """Outbox ids as PostgreSQL array text, sent typed as bigint[].

    Why: the fetch excludes the ids in flight (up to two batches), and
    psycopg's list dumper walks such a list in Python on every fetch. Each
    batch's ids are joined once, when it is fetched; typed as bigint[] (not
    text cast in SQL), the parameter stays a constant that PostgreSQL hashes.
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
