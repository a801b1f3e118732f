-- handoff.effect_submitting and handoff.effect_record as 0023-0025 have them
-- (0026_effect_plans puts them back on downgrade; 0020 and 0023 apply this file
-- after the effects family). effect_record is 0020's too.

CREATE OR REPLACE FUNCTION handoff.effect_submitting(p_id bigint, p_claim integer) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
    v_by text;
    v_attempts integer;
BEGIN
    UPDATE effect_intents e
       SET state = 'submitted', attempts = e.attempts + 1,
           submitted_at = least(e.submitted_at, now()), updated_at = now()
     WHERE e.id = p_id AND e.claim = p_claim AND e.state = 'claimed'
       AND e.tenant_id = v.tenant_id AND e.consumer = v.name
    RETURNING e.claimed_by, e.attempts INTO v_by, v_attempts;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- VALUES, not INSERT ... SELECT from the intents (since 0023): delegated to a
    -- worker inside a transaction, Citus refuses that as a distributed query run
    -- from a shard ("cannot execute a distributed query from a query on a shard").
    INSERT INTO effect_history (tenant_id, intent_id, actor, from_state, to_state, detail)
    VALUES (v.tenant_id, p_id, v_by, 'claimed', 'submitted', 'attempt ' || v_attempts);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION handoff.effect_record(
    p_id bigint, p_claim integer, p_state text, p_reconciliation text, p_provider_ref text,
    p_outcome jsonb, p_error text, p_retry_in_s double precision, p_lookup_failed boolean,
    p_detail text
) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
    v_was text;
    v_by text;
BEGIN
    IF p_state NOT IN ('succeeded', 'failed', 'unknown', 'intended') THEN
        RAISE EXCEPTION 'an attempt ends succeeded, failed, unknown or intended, not %', p_state
            USING ERRCODE = '22023';
    END IF;
    SELECT e.state, e.claimed_by INTO v_was, v_by FROM effect_intents e
     WHERE e.id = p_id AND e.claim = p_claim AND e.state IN ('claimed', 'submitted')
       AND e.tenant_id = v.tenant_id AND e.consumer = v.name
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE effect_intents e
       SET state = p_state,
           reconciliation = coalesce(p_reconciliation, e.reconciliation),
           provider_ref = coalesce(p_provider_ref, e.provider_ref),
           outcome = coalesce(p_outcome, e.outcome),
           error = p_error,
           lookups = e.lookups + CASE WHEN p_lookup_failed THEN 1 ELSE 0 END,
           lease_until = NULL,
           next_attempt_at = now() + make_interval(secs => coalesce(p_retry_in_s, 0)),
           completed_at = now() + CASE WHEN p_state IN ('succeeded', 'failed') THEN interval '0' END,
           updated_at = now()
     WHERE e.id = p_id AND e.tenant_id = v.tenant_id;
    INSERT INTO effect_history (tenant_id, intent_id, actor, from_state, to_state, detail)
    VALUES (v.tenant_id, p_id, v_by, v_was, p_state, p_detail);
    RETURN true;
END
$$;
