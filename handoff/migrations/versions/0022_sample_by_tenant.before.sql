-- handoff.fold_flow and handoff.sample_owners as 0021 has them (0022_sample_by_tenant
-- puts them back on downgrade).

-- Takes one sample of every tenant's waiting work, unless one was taken
-- less than p_every ago (several trackers: the first one samples). Cost:
-- per owner, owner_waiting plus two index offsets (the median and the p90
-- position) on document_state_by_owner; once a minute.
CREATE OR REPLACE FUNCTION handoff.sample_owners(p_every interval DEFAULT '1 minute',
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

-- Folds the outbox rows committed since the last fold (at most p_limit,
-- plus the gaps that have since appeared) into flow_minutes and flow_edges.
-- One tracker folds at a time (the row lock; the others skip). Returns the
-- number of outbox rows folded.
CREATE OR REPLACE FUNCTION handoff.fold_flow(p_limit integer DEFAULT 100000,
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
