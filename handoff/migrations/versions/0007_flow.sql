-- Flow over time (DESIGN.md "Tracker"): what moves between owners per
-- minute, the stage order learned from it, and minute samples of each
-- owner's waiting work (backlog, overdue, oldest, median and p90 age).
--
-- Why folds rather than counters kept by every emit: a per-emit counter row
-- cost 13% of emit throughput (measured, session 5). These tables are
-- filled by two functions the tracker calls now and then, from rows that
-- exist anyway: the outbox (one row per accepted change, with the owner
-- before and after) and the state indexes. A page then reads a few hundred
-- small rows, never the history.

-- Changes of owner per tenant, minute and (from, to). '' stands for "none":
-- from '' is a creation, to '' a completion. Progress without a change of
-- owner is not flow and is not counted.
CREATE TABLE handoff.flow_minutes (
    tenant_id  text        NOT NULL,
    minute     timestamptz NOT NULL,
    from_owner text        NOT NULL,
    to_owner   text        NOT NULL,
    n          bigint      NOT NULL,
    PRIMARY KEY (tenant_id, minute, from_owner, to_owner)
);
-- Creations and completions only, for the created-vs-completed chart: a
-- day is 2 x 1,440 entries whatever the number of stages.
CREATE INDEX flow_minutes_ends ON handoff.flow_minutes (tenant_id, minute)
    WHERE from_owner = '' OR to_owner = '';

-- The same, summed over all time: the edges the stage order is learned from
-- (a handful of rows per tenant, whatever the volume).
CREATE TABLE handoff.flow_edges (
    tenant_id  text        NOT NULL,
    from_owner text        NOT NULL,
    to_owner   text        NOT NULL,
    n          bigint      NOT NULL,
    last_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, from_owner, to_owner)
);

-- One minute's look at each owner's waiting work. The two age columns are
-- assignment times: half of the waiting work was assigned after age_p50_from,
-- 90% after age_p90_from, so "p90 age" = now - age_p90_from stays right
-- between samples for the work still waiting.
CREATE TABLE handoff.owner_samples (
    tenant_id          text        NOT NULL,
    sampled_at         timestamptz NOT NULL,
    owner              text        NOT NULL,
    assigned           bigint      NOT NULL,
    overdue            bigint      NOT NULL,
    oldest_assigned_at timestamptz,
    age_p50_from       timestamptz,
    age_p90_from       timestamptz,
    -- The first sample of its 10-minute bin: a day's chart reads only these
    -- (144 points a day instead of 1,440).
    coarse             boolean     NOT NULL DEFAULT false,
    -- One owner's points over a window: a range per charted owner.
    PRIMARY KEY (tenant_id, owner, sampled_at)
);
-- The latest sample of a tenant, and its owners.
CREATE INDEX owner_samples_by_time ON handoff.owner_samples (tenant_id, sampled_at);
CREATE INDEX owner_samples_coarse ON handoff.owner_samples (tenant_id, owner, sampled_at)
    WHERE coarse;

-- Where the fold has got to in the outbox. Outbox ids are taken at insert
-- and become visible at commit, so a lower id can appear after a higher one
-- was folded: every id below `high` not yet seen is kept in flow_gaps and
-- looked for again, until it appears or is old enough to be a rolled-back
-- insert (ids of rolled-back transactions never appear).
CREATE TABLE handoff.flow_fold (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    high       bigint      NOT NULL DEFAULT 0,
    folded_at  timestamptz,
    sampled_at timestamptz
);
INSERT INTO handoff.flow_fold DEFAULT VALUES;

CREATE TABLE handoff.flow_gaps (
    id         bigint      PRIMARY KEY,
    noticed_at timestamptz NOT NULL DEFAULT now()
);

-- Each owner's waiting work in one tenant: assigned (the shards summed),
-- overdue (passed deadline hours from owner_due_counts plus an exact count
-- of the current hour), the oldest assignment. One function for the
-- tracker's live counts and for the minute samples, so both count alike.
-- Plain SQL, STABLE, one SELECT: the planner inlines it into the caller's
-- query (no function-scan boundary; the reader's row-level security applies).
CREATE FUNCTION handoff.owner_waiting(p_tenant text)
RETURNS TABLE (owner text, assigned bigint, overdue bigint, oldest_assigned_at timestamptz)
LANGUAGE sql STABLE
AS $$
    WITH assigned AS (
        SELECT c.owner, sum(c.assigned)::bigint AS assigned
          FROM handoff.owner_counts c
         WHERE c.tenant_id = p_tenant
         GROUP BY c.owner
        HAVING sum(c.assigned) > 0
    ), past_due AS (
        SELECT d.owner, sum(d.n)::bigint AS n
          FROM handoff.owner_due_counts d
         WHERE d.tenant_id = p_tenant AND d.due_hour < handoff._due_bucket(now())
         GROUP BY d.owner
    )
    SELECT a.owner, a.assigned,
           coalesce(p.n, 0) + (
               SELECT count(*) FROM handoff.document_state s
                WHERE s.tenant_id = p_tenant AND s.owner = a.owner
                  AND s.due_at >= handoff._due_bucket(now()) AND s.due_at < now()
           ),
           (SELECT s.assigned_at FROM handoff.document_state s
             WHERE s.tenant_id = p_tenant AND s.owner = a.owner
             ORDER BY s.assigned_at, s.document_id
             LIMIT 1)
      FROM assigned a LEFT JOIN past_due p USING (owner)
$$;

-- Folds the outbox rows committed since the last fold (at most p_limit,
-- plus the gaps that have since appeared) into flow_minutes and flow_edges.
-- One tracker folds at a time (the row lock; the others skip). Returns the
-- number of outbox rows folded.
CREATE FUNCTION handoff.fold_flow(p_limit integer DEFAULT 100000,
                                  p_keep interval DEFAULT '8 days',
                                  p_gap_wait interval DEFAULT '5 minutes')
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_high   bigint;
    v_folded bigint;
BEGIN
    SELECT high INTO v_high FROM handoff.flow_fold FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH seen AS MATERIALIZED (
        (SELECT o.id, o.tenant_id, o.created_at,
                coalesce(o.payload->>'previousOwner', '') AS from_owner,
                coalesce(o.payload->>'owner', '') AS to_owner
           FROM handoff.outbox o
          WHERE o.id > v_high
          ORDER BY o.id
          LIMIT p_limit)
        UNION ALL
        SELECT o.id, o.tenant_id, o.created_at,
               coalesce(o.payload->>'previousOwner', ''), coalesce(o.payload->>'owner', '')
          FROM handoff.flow_gaps g JOIN handoff.outbox o USING (id)
    ), moves AS (
        SELECT * FROM seen WHERE from_owner <> to_owner
    ), minutes AS (
        INSERT INTO handoff.flow_minutes AS f (tenant_id, minute, from_owner, to_owner, n)
        SELECT tenant_id, date_bin('1 minute', created_at, timestamptz '2000-01-01 00:00:00+00'),
               from_owner, to_owner, count(*)
          FROM moves
         WHERE created_at >= now() - p_keep
         GROUP BY 1, 2, 3, 4
         ORDER BY 1, 2, 3, 4
        ON CONFLICT (tenant_id, minute, from_owner, to_owner) DO UPDATE SET n = f.n + EXCLUDED.n
        RETURNING 1
    ), edges AS (
        INSERT INTO handoff.flow_edges AS e (tenant_id, from_owner, to_owner, n, last_at)
        SELECT tenant_id, from_owner, to_owner, count(*), max(created_at)
          FROM moves
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3
        ON CONFLICT (tenant_id, from_owner, to_owner)
        DO UPDATE SET n = e.n + EXCLUDED.n, last_at = greatest(e.last_at, EXCLUDED.last_at)
        RETURNING 1
    ), found AS (
        DELETE FROM handoff.flow_gaps g USING seen s WHERE g.id = s.id RETURNING 1
    ), top AS (
        SELECT max(id) AS id FROM seen WHERE id > v_high
    ), missing AS (
        -- The ids skipped just below each new row, only below a recent row
        -- and only the nearest 10,000: an id missing under an old row, or
        -- further down than writers in flight can hold, was rolled back or
        -- deleted, and waiting for it would only grow this table.
        INSERT INTO handoff.flow_gaps (id)
        SELECT i
          FROM (SELECT id, created_at, lag(id, 1, v_high) OVER (ORDER BY id) AS below
                  FROM seen WHERE id > v_high) r,
               generate_series(greatest(r.below + 1, r.id - 10000), r.id - 1) AS i
         WHERE r.created_at >= now() - p_gap_wait
        RETURNING 1
    ), moved AS (
        UPDATE handoff.flow_fold
           SET high = greatest(high, coalesce((SELECT id FROM top), high)), folded_at = now()
        RETURNING 1
    )
    -- (Data-modifying CTEs run once whether or not the query reads them.)
    SELECT count(*) INTO v_folded FROM seen;
    -- Ids still missing after this long were rolled back; and old minutes go.
    DELETE FROM handoff.flow_gaps WHERE noticed_at < now() - p_gap_wait;
    DELETE FROM handoff.flow_minutes WHERE minute < now() - p_keep;
    RETURN v_folded;
END
$$;

-- Takes one sample of every tenant's waiting work, unless one was taken
-- less than p_every ago (several trackers: the first one samples). Cost:
-- per owner, owner_waiting plus two index offsets (the median and the p90
-- position) on document_state_by_owner; once a minute.
CREATE FUNCTION handoff.sample_owners(p_every interval DEFAULT '1 minute',
                                      p_keep interval DEFAULT '8 days')
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_sampled bigint;
BEGIN
    PERFORM 1 FROM handoff.flow_fold
      WHERE sampled_at IS NULL OR sampled_at <= now() - p_every + interval '1 second'
      FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    INSERT INTO handoff.owner_samples (tenant_id, sampled_at, owner, assigned, overdue,
                                       oldest_assigned_at, age_p50_from, age_p90_from, coarse)
    SELECT t.tenant_id, now(), w.owner, w.assigned, w.overdue, w.oldest_assigned_at,
           (SELECT s.assigned_at FROM handoff.document_state s
             WHERE s.tenant_id = t.tenant_id AND s.owner = w.owner
             ORDER BY s.assigned_at, s.document_id
            OFFSET greatest(ceil(w.assigned * 0.5)::bigint - 1, 0) LIMIT 1),
           -- 90% of the work is younger than this: the 10th percentile of assignment.
           (SELECT s.assigned_at FROM handoff.document_state s
             WHERE s.tenant_id = t.tenant_id AND s.owner = w.owner
             ORDER BY s.assigned_at, s.document_id
            OFFSET greatest(ceil(w.assigned * 0.1)::bigint - 1, 0) LIMIT 1),
           -- coarse: the owner's first sample in this 10-minute bin (so a new
           -- tenant or owner has a day chart from its first sample on)
           NOT EXISTS (SELECT 1 FROM handoff.owner_samples p
                        WHERE p.tenant_id = t.tenant_id AND p.owner = w.owner AND p.coarse
                          AND p.sampled_at >= date_bin('10 minutes', now(),
                                                       timestamptz '2000-01-01 00:00:00+00'))
      FROM (SELECT DISTINCT tenant_id FROM handoff.owner_counts) t
     CROSS JOIN LATERAL handoff.owner_waiting(t.tenant_id) w;
    GET DIAGNOSTICS v_sampled = ROW_COUNT;
    UPDATE handoff.flow_fold SET sampled_at = now();
    DELETE FROM handoff.owner_samples WHERE sampled_at < now() - p_keep;
    RETURN v_sampled;
END
$$;

-- For the operate page. The relay is shared by every tenant, so its backlog
-- is the system's (pending rows capped at p_cap: counting is a walk of the
-- pending index; the oldest is its first entry); parked rows are the
-- reader's tenant's own. SECURITY DEFINER: the reader cannot read the outbox.
CREATE FUNCTION handoff.relay_backlog(p_cap integer DEFAULT 100000)
RETURNS TABLE (pending bigint, oldest_pending_at timestamptz, parked bigint)
LANGUAGE sql STABLE SECURITY DEFINER
AS $$
    SELECT (SELECT count(*) FROM (SELECT 1 FROM handoff.outbox
                                   WHERE published_at IS NULL AND parked_at IS NULL
                                   LIMIT p_cap) AS p),
           (SELECT created_at FROM handoff.outbox
             WHERE published_at IS NULL AND parked_at IS NULL ORDER BY id LIMIT 1),
           (SELECT count(*) FROM handoff.outbox
             WHERE tenant_id = current_setting('handoff.tenant', true) AND parked_at IS NOT NULL)
$$;

-- The reader's tenant's services (their consumer groups are looked up in Kafka).
CREATE FUNCTION handoff.reader_services()
RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER
AS $$
    SELECT name FROM handoff.services
     WHERE tenant_id = current_setting('handoff.tenant', true) ORDER BY name
$$;

GRANT SELECT ON handoff.flow_minutes, handoff.flow_edges, handoff.owner_samples,
                handoff.quarantine, handoff.effect_intents TO handoff_reader;
ALTER TABLE handoff.flow_minutes ENABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.flow_edges ENABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.owner_samples ENABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.quarantine ENABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.effect_intents ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_reader ON handoff.flow_minutes FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
CREATE POLICY tenant_reader ON handoff.flow_edges FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
CREATE POLICY tenant_reader ON handoff.owner_samples FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
CREATE POLICY tenant_reader ON handoff.quarantine FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
CREATE POLICY tenant_reader ON handoff.effect_intents FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));

REVOKE ALL ON FUNCTION handoff.fold_flow, handoff.sample_owners, handoff.relay_backlog,
                       handoff.reader_services FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.owner_waiting, handoff.relay_backlog, handoff.reader_services
    TO handoff_reader;
