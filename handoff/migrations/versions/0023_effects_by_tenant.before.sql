-- handoff.effect_claim and handoff.effect_submitting as 0022 has them (0023_effects_by_tenant puts it back on
-- downgrade; 0020 applies it after the effects family).

CREATE OR REPLACE FUNCTION handoff.effect_claim(
    p_worker text, p_lease_s double precision, p_limit integer, p_submit boolean
) RETURNS TABLE (id bigint, effect text, idempotency_key text, request jsonb, document_id text,
                 run_id integer, event_id text, claim integer, attempts integer, lookups integer,
                 needs_lookup boolean, submitted boolean, recovered text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
    v_ids bigint[];
    -- A variable, not now() in the CASE below: Citus refuses a non-immutable
    -- function inside a CASE or COALESCE of a write (hence also least() and
    -- "now() + CASE ... interval '0'" in the functions after this one).
    v_now timestamptz := now();
BEGIN
    -- Two queries, each on its own partial index, rather than one ordered
    -- by "again first": that order would sort the whole backlog per claim.
    SELECT array_agg(e.id) INTO v_ids FROM (
        SELECT e.id FROM effect_intents e
         WHERE e.tenant_id = v.tenant_id AND e.consumer = v.name
           AND e.state IN ('claimed', 'submitted', 'unknown')
           AND e.reconciliation <> 'unresolved'
           AND e.next_attempt_at <= now()
           AND (e.state = 'unknown' OR e.lease_until < now())
         ORDER BY e.next_attempt_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED) e;
    IF coalesce(cardinality(v_ids), 0) < p_limit THEN
        SELECT coalesce(v_ids, '{}') || coalesce(array_agg(e.id), '{}') INTO v_ids FROM (
            SELECT e.id FROM effect_intents e
             WHERE e.tenant_id = v.tenant_id AND e.consumer = v.name
               AND e.state = 'intended'
               AND e.reconciliation <> 'unresolved'
               AND e.next_attempt_at <= now()
             ORDER BY e.next_attempt_at
             LIMIT p_limit - coalesce(cardinality(v_ids), 0)
               FOR UPDATE SKIP LOCKED) e;
    END IF;
    RETURN QUERY
    WITH ready AS (
        SELECT e.id, e.state AS was, e.claimed_by AS by, e.submitted_at IS NOT NULL AS sent,
               p_submit AND e.submitted_at IS NULL AS send
          FROM effect_intents e WHERE e.id = ANY (v_ids) AND e.tenant_id = v.tenant_id
    ), taken AS (
        UPDATE effect_intents e
           SET state = CASE WHEN ready.send THEN 'submitted' ELSE 'claimed' END,
               attempts = e.attempts + CASE WHEN ready.send THEN 1 ELSE 0 END,
               submitted_at = CASE WHEN ready.send THEN v_now ELSE e.submitted_at END,
               claim = e.claim + 1, claimed_by = p_worker,
               lease_until = now() + make_interval(secs => p_lease_s), updated_at = now()
          FROM ready
         WHERE e.id = ready.id AND e.tenant_id = v.tenant_id
        RETURNING e.*, ready.was, ready.by, ready.sent, ready.send
    ), logged AS (
        INSERT INTO effect_history (tenant_id, intent_id, actor, from_state, to_state, detail)
        SELECT t.tenant_id, t.id, p_worker, t.was, t.state,
               concat_ws('; ', CASE WHEN t.was IN ('claimed', 'submitted')
                                    THEN 'lease of ' || t.by || ' expired' END,
                         CASE WHEN t.send THEN 'claimed, attempt ' || t.attempts END)
          FROM taken t
    )
    SELECT t.id, t.effect, t.idempotency_key, t.request, t.document_id, t.run_id, t.event_id,
           t.claim, t.attempts, t.lookups, t.sent, t.send,
           CASE WHEN t.was IN ('claimed', 'submitted') THEN t.by END
      FROM taken t;
END
$$;

CREATE OR REPLACE FUNCTION handoff.effect_submitting(p_id bigint, p_claim integer) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
BEGIN
    UPDATE effect_intents e
       SET state = 'submitted', attempts = e.attempts + 1,
           submitted_at = least(e.submitted_at, now()), updated_at = now()
     WHERE e.id = p_id AND e.claim = p_claim AND e.state = 'claimed'
       AND e.tenant_id = v.tenant_id AND e.consumer = v.name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO effect_history (tenant_id, intent_id, actor, from_state, to_state, detail)
    SELECT e.tenant_id, p_id, e.claimed_by, 'claimed', 'submitted', 'attempt ' || e.attempts
      FROM effect_intents e WHERE e.id = p_id AND e.tenant_id = v.tenant_id;
    RETURN true;
END
$$;
