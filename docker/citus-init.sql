-- The Citus profile of docker-compose.yml: join the workers, then make Handoff's
-- roles on the coordinator, which Citus makes on every node (as handoff stack up
-- --citus does for the local stack: handoff/stack/citus.py). Idempotent.
SELECT citus_set_coordinator_host('citus-coordinator', 5432);
SELECT citus_add_node('citus-worker-1', 5432);
SELECT citus_add_node('citus-worker-2', 5432);

SELECT 'CREATE ROLE handoff LOGIN CREATEROLE PASSWORD ''handoff'''
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'handoff') \gexec
SELECT 'CREATE ROLE handoff_service NOLOGIN'
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'handoff_service') \gexec
-- On a lone server the app role creates the service group and so administers it.
GRANT handoff_service TO handoff WITH ADMIN OPTION;
ALTER DATABASE handoff OWNER TO handoff;
-- As the local stack sets them (handoff/stack/citus.py DATABASE_SETTINGS).
ALTER DATABASE handoff SET citus.shard_count = 16;
ALTER DATABASE handoff SET citus.propagate_set_commands = 'local';
ALTER DATABASE handoff SET citus.enable_stat_counters = on;
