"""Statements of the retention family: the one settings row and the purges.

Each purge deletes at most %(limit)s rows older than %(cutoff)s and is run
again until it deletes fewer: short transactions, no long lock, progress
visible, and a stop between batches is safe.
"""

from __future__ import annotations

from typing import LiteralString

from handoff.core import outbox_sql

SETTINGS = """
SELECT replay_window, receipts, guards, outbox, rejections, quarantine, updated_at, updated_by
  FROM handoff.retention
"""

LOCK = "SELECT 1 FROM handoff.retention FOR UPDATE"

UPDATE = """
UPDATE handoff.retention
   SET replay_window = coalesce(%(replay_window)s, replay_window),
       receipts = coalesce(%(receipts)s, receipts),
       guards = coalesce(%(guards)s, guards),
       outbox = coalesce(%(outbox)s, outbox),
       rejections = coalesce(%(rejections)s, rejections),
       quarantine = coalesce(%(quarantine)s, quarantine),
       updated_at = now(), updated_by = %(by)s
RETURNING replay_window, receipts, guards, outbox, rejections, quarantine, updated_at, updated_by
"""

PURGE_RECEIPTS = """
DELETE FROM handoff.receipts WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM handoff.receipts WHERE accepted_at < %(cutoff)s LIMIT %(limit)s))
"""

# Not the newest guard of its document run: that one is the consumer's
# position there (consumer_guards_position) and stays whatever its age.
PURGE_GUARDS = """
DELETE FROM handoff.consumer_guards WHERE ctid = ANY (ARRAY(
    SELECT g.ctid FROM handoff.consumer_guards g
     WHERE g.taken_at < %(cutoff)s
       AND EXISTS (SELECT 1 FROM handoff.consumer_guards n
                    WHERE n.tenant_id = g.tenant_id AND n.consumer = g.consumer
                      AND n.document_id = g.document_id AND n.run_id = g.run_id
                      AND n.version > g.version)
     LIMIT %(limit)s))
"""

# Published and old: the relay's own purge statement, with the run's cutoff.
PURGE_OUTBOX = outbox_sql.PURGE_BEFORE

PURGE_REJECTIONS = """
DELETE FROM handoff.rejections WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM handoff.rejections WHERE rejected_at < %(cutoff)s LIMIT %(limit)s))
"""

# Closed entries only (their audit rows go with them: ON DELETE CASCADE).
PURGE_QUARANTINE = """
DELETE FROM handoff.quarantine WHERE id IN (
    SELECT id FROM handoff.quarantine
     WHERE status IN ('resolved', 'discarded') AND resolved_at < %(cutoff)s
     LIMIT %(limit)s)
"""

CUTOFFS = """
SELECT now() - receipts AS receipts, now() - guards AS guards, now() - outbox AS outbox,
       now() - rejections AS rejections, now() - quarantine AS quarantine
  FROM handoff.retention
"""


# -- on Citus -------------------------------------------------------------------------
#
# Citus refuses a LIMIT (and ctid) inside a multi-shard DELETE. There each purge is one
# statement over every shard at once, each shard deleting its own old rows in a
# transaction of its own size (the rows of a sixteenth of the tenants, and of one run's
# window), so the batches are the shards. The guards' test names the tenant, so it
# runs on each shard.
CITUS_PURGES: dict[str, LiteralString] = {
    "receipts": "DELETE FROM handoff.receipts WHERE accepted_at < %(cutoff)s",
    "guards": """
DELETE FROM handoff.consumer_guards g
 WHERE g.taken_at < %(cutoff)s
   AND EXISTS (SELECT 1 FROM handoff.consumer_guards n
                WHERE n.tenant_id = g.tenant_id AND n.consumer = g.consumer
                  AND n.document_id = g.document_id AND n.run_id = g.run_id
                  AND n.version > g.version)
""",
    "outbox": outbox_sql.CITUS_PURGE_BEFORE,
    "rejections": "DELETE FROM handoff.rejections WHERE rejected_at < %(cutoff)s",
    "quarantine": """
DELETE FROM handoff.quarantine
 WHERE status IN ('resolved', 'discarded') AND resolved_at < %(cutoff)s
""",
}
