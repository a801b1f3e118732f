-- Entry points that name their tenant: the emit of a service's own session
-- and the API's emit, with the tenant as their first argument. On one
-- PostgreSQL they are emit_direct and emit_http with one more check; on
-- Citus (migrations/citus.py) the tenant is their distribution argument, so
-- the coordinator hands the whole call to the worker that holds the tenant:
-- one round trip and one local transaction there, instead of a round trip
-- per statement of the emit.
--
-- Clients learn their tenant once (consumer_whoami, or the API's lookup of a
-- credential) and name it on every call; a tenant that is not the caller's is
-- refused like an unknown credential, so naming another tenant reaches
-- nothing. Each function as the database holds it after `handoff db upgrade`
-- (tests/integration/contract/test_sql_functions.py checks it).

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
    v services := _consumer();  -- the session's service, or 28000
BEGIN
    IF v.tenant_id IS DISTINCT FROM p_tenant THEN
        RAISE EXCEPTION 'database role % acts in tenant %, not in %', session_user,
            v.tenant_id, p_tenant USING ERRCODE = '28000';
    END IF;
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
