-- The effect executor's calls, naming their tenant (the pattern of by_tenant.sql):
-- claim, about-to-send, and record. On one PostgreSQL each is the function it
-- wraps (effects.sql) with one more check; on Citus (migrations/citus.py) the
-- tenant is their distribution argument, so each call is handed whole to the
-- tenant's worker and runs there as one local transaction, one round trip,
-- where the coordinator used to run the function and send each of its
-- statements to the worker. Executors learn their tenant once per session
-- (consumer_whoami). A family of its own, applied from revision 0023 on: a
-- revision before that applies by_tenant.sql must not make them.

CREATE OR REPLACE FUNCTION handoff.effect_claim_for(
    p_tenant text, p_worker text, p_lease_s double precision, p_limit integer,
    p_submit boolean
) RETURNS TABLE (id bigint, effect text, idempotency_key text, request jsonb, document_id text,
                 run_id integer, event_id text, claim integer, attempts integer, lookups integer,
                 needs_lookup boolean, submitted boolean, recovered text)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN QUERY SELECT * FROM handoff.effect_claim(p_worker, p_lease_s, p_limit, p_submit);
END
$$;

CREATE OR REPLACE FUNCTION handoff.effect_submitting_for(
    p_tenant text, p_id bigint, p_claim integer
) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN handoff.effect_submitting(p_id, p_claim);
END
$$;

CREATE OR REPLACE FUNCTION handoff.effect_record_for(
    p_tenant text, p_id bigint, p_claim integer, p_state text, p_reconciliation text,
    p_provider_ref text, p_outcome jsonb, p_error text, p_retry_in_s double precision,
    p_lookup_failed boolean, p_detail text
) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN handoff.effect_record(p_id, p_claim, p_state, p_reconciliation, p_provider_ref,
                                 p_outcome, p_error, p_retry_in_s, p_lookup_failed, p_detail);
END
$$;
