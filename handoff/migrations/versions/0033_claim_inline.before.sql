-- consumer_claim_one as 0030_claim_one made it (it called _consumer()), for the
-- revisions below 0033_claim_inline and its downgrade.

CREATE OR REPLACE FUNCTION handoff.consumer_claim_one(
    p_event_id text, p_fingerprint bytea, p_document_id text, p_run_id integer,
    p_version integer, p_types text[], p_owner text, p_tenant text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- why: consumer_begin in consumers.sql
SET enable_sort = off  -- why: consumer_begin in consumers.sql
AS $$
DECLARE
    v_me      services := _consumer();
    v_blocked boolean;
    v_verdict text;
BEGIN
    IF p_tenant IS NOT NULL AND v_me.tenant_id IS DISTINCT FROM p_tenant THEN
        RAISE EXCEPTION 'database role % acts in tenant %, not in %', session_user,
            v_me.tenant_id, p_tenant USING ERRCODE = '28000';
    END IF;
    -- A statement of its own: on Citus an expression that reads a distributed
    -- table is sent whole to the tenant's shard, and _guard_one called inside
    -- it would run there, where its own statements may not be routed.
    v_blocked := EXISTS (SELECT 1 FROM quarantine q
                          WHERE q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
                            AND q.status IN ('open', 'retry'))
              OR EXISTS (SELECT 1 FROM consumer_parked p
                          WHERE p.tenant_id = v_me.tenant_id AND p.consumer = v_me.name);
    v_verdict := (_guard_one(v_me, v_blocked, p_event_id, p_fingerprint, p_document_id,
                             p_run_id, p_version, p_types, p_owner, false)).verdict;
    IF v_verdict <> 'apply' THEN
        RAISE EXCEPTION 'event not claimed: %', v_verdict USING ERRCODE = 'P0H00';
    END IF;
END
$$;
