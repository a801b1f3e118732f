-- Handing back an intent claimed and never sent: the executors of a process claim a
-- few intents ahead of the executors that will take them (consumers/claims.py), and
-- a process that stops gracefully hands back what it still holds. A family of its
-- own, applied from revision 0028_effect_release on (the functions are new there).

-- As the intent was before the claim, due now: a claim that marked it submitted
-- (p_marked: it had never been sent) is undone, its attempt and submission mark
-- with it, so the next executor sends it without a lookup and the handing back
-- costs none of its attempts. Otherwise (it was claimed to be looked up or sent
-- again) it is "intended" again, its submission mark kept, so the next executor
-- asks the provider first, as effect_record's "intended" does. False when the claim
-- was lost meanwhile (fenced out): nothing changes.
CREATE OR REPLACE FUNCTION handoff.effect_release(
    p_id bigint, p_claim integer, p_marked boolean, p_detail text
) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
    v_row effect_intents;
BEGIN
    -- By the key alone, the rest checked on the row: why in effect_record (effects.sql).
    SELECT * INTO v_row FROM effect_intents e
     WHERE e.id = p_id AND e.tenant_id = v.tenant_id
       FOR UPDATE;
    IF NOT FOUND OR v_row.consumer <> v.name OR v_row.claim <> p_claim
       OR v_row.state NOT IN ('claimed', 'submitted') THEN
        RETURN false;
    END IF;
    UPDATE effect_intents e
       SET state = 'intended',
           attempts = e.attempts - CASE WHEN p_marked THEN 1 ELSE 0 END,
           submitted_at = CASE WHEN p_marked THEN NULL ELSE e.submitted_at END,
           lease_until = NULL, next_attempt_at = now(), updated_at = now()
     WHERE e.id = p_id AND e.tenant_id = v.tenant_id;
    INSERT INTO effect_history (tenant_id, intent_id, actor, from_state, to_state, detail)
    VALUES (v.tenant_id, p_id, v_row.claimed_by, v_row.state, 'intended', p_detail);
    RETURN true;
END
$$;

-- The same naming the executor's tenant (the pattern of effects_by_tenant.sql): on
-- Citus handed whole to the tenant's worker.
CREATE OR REPLACE FUNCTION handoff.effect_release_for(
    p_tenant text, p_id bigint, p_claim integer, p_marked boolean, p_detail text
) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN handoff.effect_release(p_id, p_claim, p_marked, p_detail);
END
$$;
