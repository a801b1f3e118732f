-- Entry points that name their tenant: the emits, and every call of a
-- consumer's unit (guard, claim, hold, take, effect intent, workflow start,
-- the next emit), with the tenant as their first argument. On one PostgreSQL
-- each is the function it wraps with one more check; on Citus
-- (migrations/citus.py) the tenant is their distribution argument, and the
-- coordinator hands the whole call to the worker that holds the tenant, also
-- inside a unit's transaction (force_delegation): one round trip each, run
-- there by the session's own connection to that worker. That is what keeps a
-- unit on one connection to one worker, and so a one-node commit: a unit's
-- own writes go as the service, and a call that ran on the coordinator would
-- write as the functions' owner (SECURITY DEFINER), which Citus sends over a
-- second connection (and then commits with two phases, or refuses when both
-- touch one tenant's shards). A call forced to a worker may only run
-- statements routed by its tenant there; every statement of these functions
-- names it.
--
-- Clients learn their tenant once (consumer_whoami, or the API's lookup of a
-- credential) and name it on every call; a tenant that is not the caller's is
-- refused like an unknown credential, so naming another tenant reaches
-- nothing. Each function as the database holds it after `handoff db upgrade`
-- (tests/integration/contract/test_sql_functions.py checks it).

-- The session's service, checked to act in p_tenant (else SQLSTATE 28000).
CREATE OR REPLACE FUNCTION handoff._acts_in(p_tenant text) RETURNS handoff.services
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v services := _consumer();  -- the session's service, or 28000
BEGIN
    IF v.tenant_id IS DISTINCT FROM p_tenant THEN
        RAISE EXCEPTION 'database role % acts in tenant %, not in %', session_user,
            v.tenant_id, p_tenant USING ERRCODE = '28000';
    END IF;
    RETURN v;
END
$$;

-- A service's own session, naming its tenant (emit_direct, in contract.sql).
CREATE OR REPLACE FUNCTION handoff.emit_direct_for(
    p_tenant text,
    p_kind text, p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_sender text, p_next_owner text, p_status text, p_expected_version integer,
    p_due_at timestamptz, p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _acts_in(p_tenant);
BEGIN
    RETURN _emit(v.tenant_id, v.name, v.can_create, p_kind, p_sender, p_event_id, p_event_type,
                 p_document_id, p_run_id, p_next_owner, p_status, p_expected_version, p_due_at,
                 p_data, p_correlation_id, p_causation_id);
END
$$;

-- The API's emit, naming the credential's tenant (emit_http, in contract.sql).
CREATE OR REPLACE FUNCTION handoff.emit_http_for(
    p_tenant text, p_credential_role text, p_secret_hash bytea,
    p_kind text, p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_sender text, p_next_owner text, p_status text, p_expected_version integer,
    p_due_at timestamptz, p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off  -- why: consumer_begin in consumers.sql
AS $$
DECLARE
    v handoff.services;
BEGIN
    SELECT * INTO v FROM handoff.services
     WHERE db_role = p_credential_role AND secret_hash = p_secret_hash AND revoked_at IS NULL
       AND tenant_id = p_tenant;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('accepted', false, 'code', 'Unauthenticated',
                                  'message', 'unknown or revoked service credential');
    END IF;
    RETURN handoff._emit(v.tenant_id, v.name, v.can_create, p_kind, p_sender, p_event_id,
                 p_event_type, p_document_id, p_run_id, p_next_owner, p_status,
                 p_expected_version, p_due_at, p_data, p_correlation_id, p_causation_id);
END
$$;

-- The tenant of an API credential, learned once per credential by the API
-- (core/emitter.py), before it names it to emit_http_for.
CREATE OR REPLACE FUNCTION handoff.credential_tenant(p_credential_role text, p_secret_hash bytea)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT tenant_id FROM handoff.services
     WHERE db_role = p_credential_role AND secret_hash = p_secret_hash AND revoked_at IS NULL;
$$;

-- "handoff service remove" takes a service's lock exclusively where the
-- tenant's emits take it shared (_emit, in contract.sql): on one server that
-- is the server; on Citus a delegated emit takes it on the tenant's worker, so
-- the removal takes it there too (this call, forced to that worker inside the
-- removal's transaction, holds it until the removal commits) as well as on
-- the coordinator, where an emit inside a consumer's unit runs. PL/pgSQL, not
-- SQL: a SQL function's body would be inlined and run where it is called.
CREATE OR REPLACE FUNCTION handoff.lock_service_for(p_tenant text, p_name text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(handoff._service_lock(p_tenant, p_name));
END
$$;

-- The calls of a consumer's unit, naming its tenant. Each checks the tenant
-- and runs the function it wraps (consumers.sql, effects.sql, contract.sql),
-- which takes the service from the session as before.

CREATE OR REPLACE FUNCTION handoff.consumer_begin_for(
    p_tenant text, p_events jsonb, p_types text[], p_owner text, p_reconcile boolean
) RETURNS TABLE (verdict text, detail text)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN QUERY SELECT * FROM handoff.consumer_begin(p_events, p_types, p_owner, p_reconcile);
END
$$;

CREATE OR REPLACE FUNCTION handoff.consumer_claim_for(
    p_tenant text, p_events jsonb, p_types text[], p_owner text
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    PERFORM handoff.consumer_claim(p_events, p_types, p_owner);
END
$$;

CREATE OR REPLACE FUNCTION handoff.consumer_hold_for(
    p_tenant text, p_reason text, p_event jsonb, p_key bytea, p_value bytea, p_headers jsonb,
    p_category text, p_error text, p_attempts integer, p_handler text, p_handler_version text,
    p_wait_s double precision
) RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN handoff.consumer_hold(p_reason, p_event, p_key, p_value, p_headers, p_category,
                                 p_error, p_attempts, p_handler, p_handler_version, p_wait_s);
END
$$;

CREATE OR REPLACE FUNCTION handoff.consumer_take_for(p_tenant text, p_kind text, p_id bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN handoff.consumer_take(p_kind, p_id);
END
$$;

CREATE OR REPLACE FUNCTION handoff.effect_intend_for(
    p_tenant text, p_event_id text, p_effect text, p_document_id text, p_run_id integer,
    p_request jsonb, p_business_key text
) RETURNS TABLE (id bigint, idempotency_key text, state text, created boolean,
                 event_id text, business_key text)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN QUERY SELECT * FROM handoff.effect_intend(p_event_id, p_effect, p_document_id,
                                                     p_run_id, p_request, p_business_key);
END
$$;

CREATE OR REPLACE FUNCTION handoff.workflow_start_for(
    p_tenant text, p_workflow text, p_execution_name text, p_document_id text,
    p_run_id integer, p_event_id text, p_input jsonb
) RETURNS TABLE (execution_name text, started_at timestamptz, created boolean)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff._acts_in(p_tenant);
    RETURN QUERY SELECT * FROM handoff.workflow_start(p_workflow, p_execution_name,
                                                      p_document_id, p_run_id, p_event_id,
                                                      p_input);
END
$$;

-- The next emit of a unit, not awaited (emit_direct_or_raise, in contract.sql).
CREATE OR REPLACE FUNCTION handoff.emit_direct_or_raise_for(
    p_tenant text,
    p_kind text, p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_sender text, p_next_owner text, p_status text, p_expected_version integer,
    p_due_at timestamptz, p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_answer jsonb := handoff.emit_direct_for(p_tenant, p_kind, p_event_id, p_event_type,
                                              p_document_id, p_run_id, p_sender, p_next_owner,
                                              p_status, p_expected_version, p_due_at, p_data,
                                              p_correlation_id, p_causation_id);
BEGIN
    IF NOT (v_answer->>'accepted')::boolean THEN
        RAISE EXCEPTION '%', v_answer::text USING ERRCODE = 'P0H01';
    END IF;
END
$$;
