"""The Citus statements of a chaos run's moves (run as the superuser, on the coordinator)."""

from __future__ import annotations

# The tenant's rows of every co-located table into shards of their own (a split
# of its shard group). Blocking: writes to the group wait while it is split (the
# run measures how long). Why not online ('auto', logical replication): with
# concurrent updates Citus's non-blocking split can stall for good, its apply
# worker failing on a replica identity it says was not sent (seen here with
# Citus 14.0.1; citusdata/citus#6790 reports the stall). Moves are online.
ISOLATE = """
SELECT isolate_tenant_to_new_shard('handoff.document_state', %(tenant)s::text, 'CASCADE',
                                   shard_transfer_mode => 'block_writes')
"""

# Where the tenant's shard of document_state is now (its co-located shards are there too).
PLACEMENT = """
SELECT s.shardid, s.nodename, s.nodeport FROM citus_shards s
 WHERE s.shardid = get_shard_id_for_distribution_column('handoff.document_state',
                                                        %(tenant)s::text)
"""

# The workers it may go to.
OTHER_WORKERS = """
SELECT nodename, nodeport FROM pg_dist_node
 WHERE groupid <> 0 AND isactive AND noderole = 'primary' AND shouldhaveshards
   AND NOT (nodename = %(host)s AND nodeport = %(port)s)
 ORDER BY nodeport
"""

# The shard and its co-located shards, online (logical replication).
MOVE = """
SELECT citus_move_shard_placement(%s, %s, %s, %s, %s, shard_transfer_mode => 'auto')
"""
