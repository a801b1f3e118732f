-- Functions only a Citus database calls (handoff/migrations/citus.py adds the columns
-- they use). A family of its own, applied from revision 0022 on: a revision before
-- that applies the tracker family must not make them.

-- fold_flow on Citus, where the outbox has a folded_at mark (migrations/citus.py):
-- each tenant's unmarked rows (at most p_limit of them a fold) are marked and
-- folded in one statement, which names the tenant, so it runs on the tenant's
-- worker as one local transaction. Exactly once without a sequence: a row is
-- folded with its mark, and a late commit is simply unmarked until a later fold.
CREATE OR REPLACE FUNCTION handoff._fold_flow_marked(p_limit integer, p_keep interval)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_tenant text;
    v_rows   bigint;
    v_folded bigint := 0;
BEGIN
    PERFORM 1 FROM handoff.flow_fold FOR UPDATE SKIP LOCKED;  -- one tracker folds at a time
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR v_tenant IN SELECT DISTINCT tenant_id FROM handoff.outbox WHERE folded_at IS NULL LOOP
        WITH seen AS (
            UPDATE handoff.outbox o SET folded_at = now()
             WHERE o.tenant_id = v_tenant AND o.folded_at IS NULL
               AND o.id IN (SELECT u.id FROM handoff.outbox u
                             WHERE u.tenant_id = v_tenant AND u.folded_at IS NULL
                             ORDER BY u.id LIMIT p_limit)
            RETURNING o.tenant_id, o.created_at,
                      coalesce(o.payload->>'previousOwner', '') AS from_owner,
                      coalesce(o.payload->>'owner', '') AS to_owner
        ), moves AS (
            SELECT * FROM seen WHERE from_owner <> to_owner
        ), minutes AS (
            INSERT INTO handoff.flow_minutes AS f (tenant_id, minute, from_owner, to_owner, n)
            SELECT tenant_id,
                   date_bin('1 minute', created_at, timestamptz '2000-01-01 00:00:00+00'),
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
        )
        SELECT count(*) INTO v_rows FROM seen;
        v_folded := v_folded + v_rows;
    END LOOP;
    UPDATE handoff.flow_fold SET folded_at = now();
    DELETE FROM handoff.flow_minutes WHERE minute < now() - p_keep;
    RETURN v_folded;
END
$$;
