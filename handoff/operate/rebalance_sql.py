"""Statements of a Citus rebalance (``handoff db rebalance``), run on the coordinator."""

from __future__ import annotations

# A background job of shard moves; NULL when the shards are balanced already.
START = "SELECT citus_rebalance_start(shard_transfer_mode => 'auto')"
# The job's state and how many of its tasks are in each state.
STATUS = """
SELECT state::text, coalesce(details -> 'task_state_counts', '{}'::jsonb)
  FROM citus_job_status(%s)
"""
# Where each worker's shards are, to report before and after.
SHARDS_PER_WORKER = """
SELECT n.nodename || ':' || n.nodeport, count(s.shardid)::int
  FROM pg_dist_node n LEFT JOIN citus_shards s ON s.nodename = n.nodename
   AND s.nodeport = n.nodeport AND s.citus_table_type = 'distributed'
 WHERE n.groupid <> 0 AND n.isactive AND n.noderole = 'primary'
 GROUP BY 1 ORDER BY 1
"""
# Distributed tables whose shards logical replication cannot move: no primary key and
# no replica identity (Citus then refuses an online move of their shard group). With
# ``group_of``, only the tables co-located with that table; else every one.
UNMOVABLE = """
SELECT p.logicalrelid::regclass::text
  FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
 WHERE p.partmethod = 'h'
   AND (c.relreplident = 'n'
        OR (c.relreplident = 'd'
            AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)))
   AND (%(group_of)s::regclass IS NULL OR p.colocationid = (
        SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = %(group_of)s::regclass))
 ORDER BY 1
"""
