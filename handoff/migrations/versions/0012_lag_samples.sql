-- Consumer lag, sampled into the database by a process of its own (issue 22).
--
-- The tracker used to ask Kafka for each group's committed offsets while
-- serving a request; on a broker whose group coordinator was not ready yet
-- (a fresh cluster, a coordinator moving) librdkafka's offset lookup crashed
-- the whole server with SIGSEGV. No call into a native library that can crash
-- or hang runs in the serving process now: a sampler child of `handoff serve`
-- writes what it found here, with the time, and the operate page reads it
-- (or says since when lag has been unavailable).
--
-- Keyed by the Kafka cluster (its bootstrap servers, sorted): a database
-- normally serves one, but nothing stops two trackers of one database from
-- pointing at two clusters, and each must read its own cluster's samples.
CREATE TABLE handoff.consumer_lag (
    cluster    text        NOT NULL,
    tenant_id  text        NOT NULL,
    consumer   text        NOT NULL,
    group_id   text        NOT NULL,
    lag        bigint      NOT NULL CHECK (lag >= 0),
    partitions integer     NOT NULL CHECK (partitions >= 0),
    sampled_at timestamptz NOT NULL,
    PRIMARY KEY (cluster, tenant_id, consumer)
);

-- How the sampling goes: the last complete sample, and since when it fails
-- (NULL while it works). One row per cluster.
CREATE TABLE handoff.lag_sampler (
    cluster       text        PRIMARY KEY,
    sampled_at    timestamptz,
    failing_since timestamptz,
    error         text,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT ON handoff.consumer_lag TO handoff_reader;
ALTER TABLE handoff.consumer_lag ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_reader ON handoff.consumer_lag FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
-- The reader sees when, never why (an error may name hosts and ports).
GRANT SELECT (cluster, sampled_at, failing_since) ON handoff.lag_sampler TO handoff_reader;
