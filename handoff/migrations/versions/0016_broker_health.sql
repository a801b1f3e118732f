-- The health of the Kafka cluster, sampled with consumer lag (issue 24).
--
-- A replicated cluster keeps working with a broker down, so nothing else
-- would show it: the sampler (a child of `handoff serve`, never the serving
-- process) records what one metadata request says, and the operate page
-- shows a missing broker and under-replicated partitions until they are back.
-- A broker is "missing" when partitions name it as a replica but the cluster
-- does not list it: no list of expected brokers is configured anywhere.
ALTER TABLE handoff.lag_sampler
    ADD COLUMN brokers_up         integer,
    ADD COLUMN brokers_missing    integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN missing_since      timestamptz,
    ADD COLUMN under_replicated   integer,
    ADD COLUMN offline_partitions integer;

-- Broker ids and counts say nothing about hosts or ports: readers may see them.
GRANT SELECT (brokers_up, brokers_missing, missing_since, under_replicated, offline_partitions)
    ON handoff.lag_sampler TO handoff_reader;
