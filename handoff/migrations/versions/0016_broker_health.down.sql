REVOKE SELECT (brokers_up, brokers_missing, missing_since, under_replicated, offline_partitions)
    ON handoff.lag_sampler FROM handoff_reader;
ALTER TABLE handoff.lag_sampler
    DROP COLUMN brokers_up,
    DROP COLUMN brokers_missing,
    DROP COLUMN missing_since,
    DROP COLUMN under_replicated,
    DROP COLUMN offline_partitions;
