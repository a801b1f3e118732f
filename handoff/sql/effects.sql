-- The effect ledger and workflow starts: an intent recorded in the guard's
-- transaction, claims with a lease, the submission mark and the outcome's
-- record.
--
-- Each function as the database holds it after `handoff db upgrade`, with
-- the why of it: tests/integration/contract/test_sql_functions.py applies
-- this file to an upgraded database and checks that no definition changes.
-- Only the migration that changes a function applies its family's file
-- (handoff/migrations/helpers.py apply_family); grants and tables stay in
-- the migrations, and old databases still upgrade step by step.

-- Record an intent in the caller's (guard) transaction. The key and the
-- request's fingerprint are computed here, not taken from the caller, so no
-- service can choose another's key. Answers the intent that now stands for
-- the operation and whether this call created it: an existing one when the
-- same event asked before with the same request, or when another event
-- already asked for the same business operation. The same event asking with
-- another request is refused (22H01): an effect's request must not change.
CREATE OR REPLACE FUNCTION handoff.effect_intend(
    p_event_id text, p_effect text, p_document_id text, p_run_id integer,
    p_request jsonb, p_business_key text
) RETURNS TABLE (id bigint, idempotency_key text, state text, created boolean,
                 event_id text, business_key text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
    v_key text;
    v_fp bytea := sha256(convert_to(p_request::text, 'UTF8'));
    v_row effect_intents;
BEGIN
    IF p_effect !~ '^[a-z][a-z0-9_-]{0,39}$' THEN
        RAISE EXCEPTION 'effect name % must be 1-40 of a-z, 0-9, _ and -, starting with a letter',
            p_effect USING ERRCODE = '22H00';
    END IF;
    -- Stable, never random: the same (tenant, consumer, event, effect)
    -- always gives the same key, on every attempt and after any crash.
    v_key := v.name || '.' || p_effect || '.' || encode(substring(sha256(convert_to(
        v.tenant_id || chr(31) || v.name || chr(31) || p_event_id || chr(31) || p_effect,
        'UTF8')) FROM 1 FOR 16), 'hex');
    INSERT INTO effect_intents AS e (tenant_id, consumer, event_id, effect, idempotency_key,
                                     business_key, document_id, run_id, request, fingerprint,
                                     owner)
    VALUES (v.tenant_id, v.name, p_event_id, p_effect, v_key, p_business_key, p_document_id,
            p_run_id, p_request, v_fp, v.name)
    ON CONFLICT DO NOTHING
    RETURNING e.* INTO v_row;
    IF FOUND THEN
        INSERT INTO effect_history (tenant_id, intent_id, actor, to_state, detail)
        VALUES (v.tenant_id, v_row.id, v.name, 'intended', 'recorded with event ' || p_event_id);
        PERFORM pg_notify('handoff_effects', v.tenant_id || '/' || v.name);
        RETURN QUERY SELECT v_row.id, v_row.idempotency_key, v_row.state, true,
                            v_row.event_id, v_row.business_key;
        RETURN;
    END IF;
    SELECT * INTO v_row FROM effect_intents e
     WHERE e.tenant_id = v.tenant_id AND e.consumer = v.name AND e.event_id = p_event_id
       AND e.effect = p_effect;
    IF FOUND THEN
        IF v_row.fingerprint <> v_fp THEN
            RAISE EXCEPTION 'event % already recorded effect % with another request',
                p_event_id, p_effect USING ERRCODE = '22H01';
        END IF;
    ELSE
        SELECT * INTO v_row FROM effect_intents e
         WHERE e.tenant_id = v.tenant_id AND e.consumer = v.name AND e.effect = p_effect
           AND e.business_key = p_business_key;
        IF NOT FOUND THEN  -- the conflicting row's transaction rolled back meanwhile
            RAISE EXCEPTION 'effect intent changed concurrently' USING ERRCODE = '40001';
        END IF;
    END IF;
    RETURN QUERY SELECT v_row.id, v_row.idempotency_key, v_row.state, false,
                        v_row.event_id, v_row.business_key;
END
$$;

-- Claim up to p_limit intents for p_worker for p_lease_s seconds [SQS
-- visibility timeout]. Intents to take again come first: an unknown outcome
-- whose retry is due (a lookup settles it; behind a backlog of new intents it
-- would wait minutes, measured) and claimed or submitted ones whose lease ran
-- out (their executor died); then new ones, oldest due first. The claim
-- counter is the fencing token: a late executor whose lease was taken over
-- finds its token stale and records nothing. needs_lookup: the intent was
-- submitted before, so the provider must be asked before any retry.
-- p_submit: an intent never submitted is claimed and marked submitted in
-- one step (one transaction fewer per effect; a crash before the send makes
-- the next executor look it up, finding nothing, and send).
-- enable_sort off: both queries below have an index in their order (effect_intents_again,
-- effect_intents_ready). A plan made while the table's statistics still counted a few
-- rows (a burst of intents, autovacuum not yet round) took the consumer's every intent
-- through the unique (tenant, consumer, event, effect) index and sorted them: 6.6 ms and
-- 2,100 buffers a claim at 4,000 intents, 0.1 ms and 4 buffers in index order.
CREATE OR REPLACE FUNCTION handoff.effect_claim(
    p_worker text, p_lease_s double precision, p_limit integer, p_submit boolean
) RETURNS TABLE (id bigint, effect text, idempotency_key text, request jsonb, document_id text,
                 run_id integer, event_id text, claim integer, attempts integer, lookups integer,
                 needs_lookup boolean, submitted boolean, recovered text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
SET enable_sort = off  -- since 0026_effect_plans; why: the comment above the function
AS $$
DECLARE
    v services := _consumer();
    v_ids bigint[];
    v_id bigint;
    v_was text;
    v_by text;
    v_sent boolean;
    v_send boolean;
    v_row effect_intents;
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
    -- One intent at a time, in three statements that each name the tenant: on Citus
    -- each runs on the tenant's shard where the function runs. As one statement (a
    -- CTE reading, updating, then logging) Citus planned the update's rows as an
    -- intermediate result sent to every node: 30 ms a claim instead of 1 (since 0023).
    FOREACH v_id IN ARRAY coalesce(v_ids, '{}') LOOP
        SELECT e.state, e.claimed_by, e.submitted_at IS NOT NULL,
               p_submit AND e.submitted_at IS NULL
          INTO v_was, v_by, v_sent, v_send
          FROM effect_intents e WHERE e.tenant_id = v.tenant_id AND e.id = v_id;
        UPDATE effect_intents e
           SET state = CASE WHEN v_send THEN 'submitted' ELSE 'claimed' END,
               attempts = e.attempts + CASE WHEN v_send THEN 1 ELSE 0 END,
               submitted_at = CASE WHEN v_send THEN v_now ELSE e.submitted_at END,
               claim = e.claim + 1, claimed_by = p_worker,
               lease_until = now() + make_interval(secs => p_lease_s), updated_at = now()
         WHERE e.tenant_id = v.tenant_id AND e.id = v_id
        RETURNING e.* INTO v_row;
        INSERT INTO effect_history (tenant_id, intent_id, actor, from_state, to_state, detail)
        VALUES (v.tenant_id, v_id, p_worker, v_was, v_row.state,
                concat_ws('; ', CASE WHEN v_was IN ('claimed', 'submitted')
                                     THEN 'lease of ' || v_by || ' expired' END,
                          CASE WHEN v_send THEN 'claimed, attempt ' || v_row.attempts END));
        id := v_id;
        effect := v_row.effect;
        idempotency_key := v_row.idempotency_key;
        request := v_row.request;
        document_id := v_row.document_id;
        run_id := v_row.run_id;
        event_id := v_row.event_id;
        claim := v_row.claim;
        attempts := v_row.attempts;
        lookups := v_row.lookups;
        needs_lookup := v_sent;
        submitted := v_send;
        recovered := CASE WHEN v_was IN ('claimed', 'submitted') THEN v_by END;
        RETURN NEXT;
    END LOOP;
END
$$;

-- About to send: the intent is "submitted" from now on, so whoever takes it
-- next asks the provider first. False: the claim was lost (fenced out);
-- the caller must not send.
CREATE OR REPLACE FUNCTION handoff.effect_submitting(p_id bigint, p_claim integer) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
    v_row effect_intents;
    v_by text;
    v_attempts integer;
BEGIN
    -- By the key alone, the rest checked on the row: why in effect_record.
    SELECT * INTO v_row FROM effect_intents e
     WHERE e.id = p_id AND e.tenant_id = v.tenant_id
       FOR UPDATE;
    IF NOT FOUND OR v_row.consumer <> v.name OR v_row.claim <> p_claim
       OR v_row.state <> 'claimed' THEN
        RETURN false;
    END IF;
    UPDATE effect_intents e
       SET state = 'submitted', attempts = e.attempts + 1,
           submitted_at = least(e.submitted_at, now()), updated_at = now()
     WHERE e.id = p_id AND e.tenant_id = v.tenant_id
    RETURNING e.claimed_by, e.attempts INTO v_by, v_attempts;
    -- VALUES, not INSERT ... SELECT from the intents (since 0023): delegated to a
    -- worker inside a transaction, Citus refuses that as a distributed query run
    -- from a shard ("cannot execute a distributed query from a query on a shard").
    INSERT INTO effect_history (tenant_id, intent_id, actor, from_state, to_state, detail)
    VALUES (v.tenant_id, p_id, v_by, 'claimed', 'submitted', 'attempt ' || v_attempts);
    RETURN true;
END
$$;

-- What an attempt or a lookup found. p_state: succeeded | failed (final),
-- unknown (an answer was lost: look up before retrying), intended (nothing
-- reached the provider: submit again). p_retry_in_s: when to try next;
-- p_unresolved: give up asking and wait for a person (the owner). False when
-- the claim was lost meanwhile (fenced out): nothing is recorded.
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
    v_row effect_intents;
BEGIN
    IF p_state NOT IN ('succeeded', 'failed', 'unknown', 'intended') THEN
        RAISE EXCEPTION 'an attempt ends succeeded, failed, unknown or intended, not %', p_state
            USING ERRCODE = '22023';
    END IF;
    -- The intent by its key alone, its claim and owner checked on the row: with them in
    -- the condition, a plan made while the table's statistics still counted a few rows
    -- took the consumer's every intent through the unique (tenant, consumer, event,
    -- effect) index to find one (2.6 ms and 1,300 buffers a call at 4,000 intents; by
    -- the key 0.1 ms).
    SELECT * INTO v_row FROM effect_intents e
     WHERE e.id = p_id AND e.tenant_id = v.tenant_id
       FOR UPDATE;
    IF NOT FOUND OR v_row.consumer <> v.name OR v_row.claim <> p_claim
       OR v_row.state NOT IN ('claimed', 'submitted') THEN
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
    VALUES (v.tenant_id, p_id, v_row.claimed_by, v_row.state, p_state, p_detail);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION handoff.workflow_start(
    p_workflow text, p_execution_name text, p_document_id text, p_run_id integer,
    p_event_id text, p_input jsonb
) RETURNS TABLE (execution_name text, started_at timestamptz, created boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v services := _consumer();
    v_row workflow_runs;
BEGIN
    IF p_execution_name !~ '^[A-Za-z0-9_.-]{1,80}$' THEN
        RAISE EXCEPTION 'execution name % must be 1-80 of A-Z, a-z, 0-9, _, . and -',
            p_execution_name USING ERRCODE = '22H00';
    END IF;
    INSERT INTO workflow_runs AS w (tenant_id, workflow, execution_name, document_id, run_id,
                                    event_id, started_by, input)
    VALUES (v.tenant_id, p_workflow, p_execution_name, p_document_id, p_run_id, p_event_id,
            v.name, p_input)
    ON CONFLICT DO NOTHING
    RETURNING w.* INTO v_row;
    IF FOUND THEN
        RETURN QUERY SELECT v_row.execution_name, v_row.started_at, true;
        RETURN;
    END IF;
    SELECT * INTO v_row FROM workflow_runs w
     WHERE w.tenant_id = v.tenant_id AND w.workflow = p_workflow
       AND w.execution_name = p_execution_name
       FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow run changed concurrently' USING ERRCODE = '40001';
    END IF;
    IF v_row.input <> p_input THEN
        RAISE EXCEPTION 'workflow run % of % exists with another input', p_execution_name,
            p_workflow USING ERRCODE = '22H02';
    END IF;
    RETURN QUERY SELECT v_row.execution_name, v_row.started_at, false;
END
$$;
