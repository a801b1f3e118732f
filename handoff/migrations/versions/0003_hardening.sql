-- Hardening (issue 9): the naming rule and the deadline range for direct SQL
-- callers too, owners that must exist, and credentials with a lifecycle.

-- The naming rule of handoff/core/names.py, for callers that skip the Python
-- models (direct SQL). The character class is FORBIDDEN_RANGES of names.py
-- (PostgreSQL text holds neither NUL nor surrogates, so those are left out);
-- tests/integration/contract/test_hardening.py compares the two code point by
-- code point. NULL means "no problem".
CREATE FUNCTION handoff._id_problem(p text, p_what text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN p IS NULL THEN NULL
    WHEN char_length(p) NOT BETWEEN 1 AND 200 THEN p_what || ' must be 1-200 characters'
    WHEN p ~ '[\u0020\u0001-\u001F\u007F-\u00A0\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u1680\u180E\u2000-\u200F\u2028-\u202F\u205F-\u2064\u2066-\u206F\u3000\uE000-\uF8FF\uFDD0-\uFDEF\uFEFF\uFFF9-\uFFFB\uFFFE-\uFFFF\U000110BD\U000110CD\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U0001FFFE-\U0001FFFF\U0002FFFE-\U0002FFFF\U0003FFFE-\U0003FFFF\U0004FFFE-\U0004FFFF\U0005FFFE-\U0005FFFF\U0006FFFE-\U0006FFFF\U0007FFFE-\U0007FFFF\U0008FFFE-\U0008FFFF\U0009FFFE-\U0009FFFF\U000AFFFE-\U000AFFFF\U000BFFFE-\U000BFFFF\U000CFFFE-\U000CFFFF\U000DFFFE-\U000DFFFF\U000E0001\U000E0020-\U000E007F\U000EFFFE-\U0010FFFF/]' THEN
        p_what || ' must not contain whitespace, control or formatting characters or ''/'''
    WHEN p IN ('.', '..') THEN p_what || ' must not be ''.'' or ''..'''
    WHEN NOT p IS NFC NORMALIZED THEN p_what || ' must be in Unicode NFC form'
END;

CREATE FUNCTION handoff._label_problem(p text, p_what text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN p IS NULL THEN NULL
    WHEN char_length(p) NOT BETWEEN 1 AND 64 THEN p_what || ' must be 1-64 characters'
    WHEN p LIKE ' %' OR p LIKE '% ' THEN p_what || ' must not start or end with a space'
    WHEN p ~ '[\u0001-\u001F\u007F-\u00A0\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u1680\u180E\u2000-\u200F\u2028-\u202F\u205F-\u2064\u2066-\u206F\u3000\uE000-\uF8FF\uFDD0-\uFDEF\uFEFF\uFFF9-\uFFFB\uFFFE-\uFFFF\U000110BD\U000110CD\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U0001FFFE-\U0001FFFF\U0002FFFE-\U0002FFFF\U0003FFFE-\U0003FFFF\U0004FFFE-\U0004FFFF\U0005FFFE-\U0005FFFF\U0006FFFE-\U0006FFFF\U0007FFFE-\U0007FFFF\U0008FFFE-\U0008FFFF\U0009FFFE-\U0009FFFF\U000AFFFE-\U000AFFFF\U000BFFFE-\U000BFFFF\U000CFFFE-\U000CFFFF\U000DFFFE-\U000DFFFF\U000E0001\U000E0020-\U000E007F\U000EFFFE-\U0010FFFF]' THEN p_what || ' must not contain control or formatting characters'
    WHEN NOT p IS NFC NORMALIZED THEN p_what || ' must be in Unicode NFC form'
END;

-- Every accepted instant stays readable everywhere (models.py EARLIEST/LATEST).
CREATE FUNCTION handoff._instant_problem(p timestamptz, p_what text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN p NOT BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 23:59:59.999999+00' THEN
        p_what || ' must be between 0001-01-02T00:00:00Z and 9999-12-30T23:59:59.999999Z'
END;

-- Tenants and services (so owners) follow the name rule; $ in PostgreSQL's
-- regular expressions matches only at the very end (no trailing newline).
ALTER TABLE handoff.services
    ADD CONSTRAINT services_name_rule CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    ADD CONSTRAINT services_tenant_rule CHECK (tenant_id ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    -- Revoked: neither the HTTP secret nor the database login works; work
    -- may still be handed to it (it waits, visible) until it is rotated back in.
    ADD COLUMN IF NOT EXISTS revoked_at timestamptz,
    ADD COLUMN IF NOT EXISTS rotated_at timestamptz;

-- The rules of 0001's _emit stay as they were; this wrapper adds the checks
-- in front of them, so that one function still holds each rule once.
ALTER FUNCTION handoff._emit(text, text, boolean, text, text, text, text, text, integer, text,
                             text, integer, timestamptz, jsonb, text, text)
    RENAME TO _emit_checked;

CREATE FUNCTION handoff._emit(
    p_tenant text, p_service text, p_can_create boolean, p_kind text, p_claimed_sender text,
    p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_next_owner text, p_status text, p_expected_version integer, p_due_at timestamptz,
    p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_problem text;
BEGIN
    -- SQLSTATE 22H00: a request that breaks the naming rule or the instant
    -- range. The client layer passes these messages on as written; other
    -- database text never reaches a client (see core/db.py).
    v_problem := coalesce(
        handoff._id_problem(p_event_id, 'eventId'),
        handoff._id_problem(p_document_id, 'documentId'),
        handoff._id_problem(p_event_type, 'eventType'),
        handoff._id_problem(p_correlation_id, 'correlationId'),
        handoff._id_problem(p_causation_id, 'causationId'),
        handoff._label_problem(p_status, 'status'),
        handoff._instant_problem(p_due_at, 'dueAt'));
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = '22H00';
    END IF;

    -- The next owner must be a service of this tenant: a typo would create
    -- work nobody can move. Progress (same owner) and completion need no
    -- check. The shared advisory lock pairs with the exclusive one of
    -- "handoff service remove": an assignment to a service and its removal
    -- cannot interleave, so removal never strands a document.
    IF p_next_owner IS NOT NULL AND (p_kind <> 'handoff' OR p_next_owner <> p_service)
       AND (p_claimed_sender IS NULL OR p_claimed_sender = p_service) THEN
        PERFORM pg_advisory_xact_lock_shared(handoff._service_lock(p_tenant, p_next_owner));
        IF NOT EXISTS (SELECT 1 FROM handoff.services
                        WHERE tenant_id = p_tenant AND name = p_next_owner)
           -- an identical retry of an accepted request still gets its receipt
           AND NOT EXISTS (SELECT 1 FROM handoff.receipts
                            WHERE tenant_id = p_tenant AND event_id = p_event_id) THEN
            RETURN handoff._reject(p_tenant, p_service, jsonb_build_object(
                    'eventId', p_event_id, 'eventType', p_event_type,
                    'documentId', p_document_id, 'runId', p_run_id, 'nextOwner', p_next_owner,
                    'status', p_status, 'expectedVersion', p_expected_version),
                'UnknownOwner',
                format('%s is not a service of tenant %s; register it first '
                       '(handoff service add %s --tenant %s)',
                       p_next_owner, p_tenant, p_next_owner, p_tenant),
                NULL, NULL);
        END IF;
    END IF;
    RETURN handoff._emit_checked(p_tenant, p_service, p_can_create, p_kind, p_claimed_sender,
                                 p_event_id, p_event_type, p_document_id, p_run_id, p_next_owner,
                                 p_status, p_expected_version, p_due_at, p_data,
                                 p_correlation_id, p_causation_id);
END
$$;

-- The advisory lock key of one service (one bigint key space, apart from
-- the relays' two-integer slot locks).
CREATE FUNCTION handoff._service_lock(p_tenant text, p_name text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended(p_tenant || '/' || p_name, 18543);

-- Revoked services authenticate neither way. The check is per call, so a
-- session that logged in before the revocation is refused too.
CREATE OR REPLACE FUNCTION handoff.emit_direct(
    p_kind text, p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_sender text, p_next_owner text, p_status text, p_expected_version integer,
    p_due_at timestamptz, p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v services;
BEGIN
    SELECT * INTO v FROM services WHERE db_role = session_user AND revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'database role % is not an active Handoff service (unknown or revoked)',
            session_user USING ERRCODE = '28000';
    END IF;
    RETURN _emit(v.tenant_id, v.name, v.can_create, p_kind, p_sender, p_event_id, p_event_type,
                 p_document_id, p_run_id, p_next_owner, p_status, p_expected_version, p_due_at,
                 p_data, p_correlation_id, p_causation_id);
END
$$;

CREATE OR REPLACE FUNCTION handoff.emit_http(
    p_credential_role text, p_secret_hash bytea,
    p_kind text, p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_sender text, p_next_owner text, p_status text, p_expected_version integer,
    p_due_at timestamptz, p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v handoff.services;
BEGIN
    SELECT * INTO v FROM handoff.services
     WHERE db_role = p_credential_role AND secret_hash = p_secret_hash AND revoked_at IS NULL;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('accepted', false, 'code', 'Unauthenticated',
                                  'message', 'unknown or revoked service credential');
    END IF;
    RETURN handoff._emit(v.tenant_id, v.name, v.can_create, p_kind, p_sender, p_event_id,
                 p_event_type, p_document_id, p_run_id, p_next_owner, p_status,
                 p_expected_version, p_due_at, p_data, p_correlation_id, p_causation_id);
END
$$;

CREATE OR REPLACE FUNCTION handoff.reader_session(p_role text, p_secret_hash bytea)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE sql SECURITY DEFINER
AS $$
    SELECT set_config('handoff.tenant', s.tenant_id, true), s.name
      FROM handoff.services s
     WHERE s.db_role = p_role AND s.secret_hash = p_secret_hash AND s.revoked_at IS NULL;
$$;

REVOKE ALL ON FUNCTION handoff._id_problem, handoff._label_problem, handoff._instant_problem,
                       handoff._emit, handoff._emit_checked, handoff._service_lock FROM PUBLIC;
