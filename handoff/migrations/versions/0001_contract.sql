-- The handoff contract (DESIGN.md "State model", "The emit contract", "Identity").
-- Every key starts with tenant_id. Isolation is READ COMMITTED throughout: the
-- owner and version checks are conditions of the UPDATE itself, so a second
-- writer blocks on the row lock, re-evaluates them against the committed row,
-- and finds no match; no two calls can advance one version.

CREATE SCHEMA handoff;

DO $$
BEGIN
    -- Group role of the services' own logins (direct mode). Roles are
    -- cluster-wide, hence the existence check.
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'handoff_service') THEN
        CREATE ROLE handoff_service NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA handoff TO handoff_service;
ALTER DEFAULT PRIVILEGES IN SCHEMA handoff REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- Services and their credentials [IAM principal]. A credential is
-- "<db_role>.<secret>": HTTP callers present it as a bearer token (we keep
-- only sha256(secret): the secret is 256 random bits, so a fast hash is the
-- right one); direct callers log in as db_role with the secret as password.
CREATE TABLE handoff.services (
    tenant_id   text        NOT NULL,
    name        text        NOT NULL,
    can_create  boolean     NOT NULL DEFAULT false,
    db_role     text        NOT NULL UNIQUE,
    secret_hash bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

-- Current state of each run of each document [PK=DOC#id, SK=STATE].
CREATE TABLE handoff.document_state (
    tenant_id    text        NOT NULL,
    document_id  text        NOT NULL,
    run_id       integer     NOT NULL CHECK (run_id >= 1),
    owner        text,
    status       text        NOT NULL,
    version      integer     NOT NULL CHECK (version >= 1),
    assigned_at  timestamptz,
    due_at       timestamptz,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    completed_at timestamptz,
    data         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (tenant_id, document_id, run_id),
    CHECK ((owner IS NULL) = (completed_at IS NOT NULL))
) WITH (fillfactor = 85);  -- room for HOT updates on progress (no indexed column changes)

-- [GSI ByOwner] sparse: finished documents are not in it.
CREATE INDEX document_state_by_owner
    ON handoff.document_state (tenant_id, owner, assigned_at, document_id)
    WHERE owner IS NOT NULL;

-- [GSI ByOwnerDue] sparse: only assigned documents with a deadline.
CREATE INDEX document_state_by_owner_due
    ON handoff.document_state (tenant_id, owner, due_at, document_id)
    WHERE owner IS NOT NULL AND due_at IS NOT NULL;

-- One row per accepted version [SK=EVENT#<version>].
CREATE TABLE handoff.document_history (
    tenant_id      text        NOT NULL,
    document_id    text        NOT NULL,
    run_id         integer     NOT NULL,
    version        integer     NOT NULL,
    event_id       text        NOT NULL,
    event_type     text        NOT NULL,
    sender         text        NOT NULL,
    owner_before   text,
    owner_after    text,
    status         text        NOT NULL,
    accepted_at    timestamptz NOT NULL,
    assigned_at    timestamptz,
    due_at         timestamptz,
    data           jsonb       NOT NULL,
    correlation_id text,
    causation_id   text,
    PRIMARY KEY (tenant_id, document_id, run_id, version)
);

-- Assigned documents per owner [count items], split over shards: one busy
-- owner would otherwise be one hot row that every handoff into it queues on.
-- A writer picks its shard from its backend pid, so concurrent connections
-- rarely share a row; a shard may go negative, only the sum means anything.
CREATE TABLE handoff.owner_counts (
    tenant_id text     NOT NULL,
    owner     text     NOT NULL,
    shard     smallint NOT NULL,
    assigned  bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, owner, shard)
) WITH (fillfactor = 50);  -- counters are updated in place (HOT), often

-- One per accepted event id: the idempotency record.
CREATE TABLE handoff.receipts (
    tenant_id   text        NOT NULL,
    event_id    text        NOT NULL,
    fingerprint bytea       NOT NULL,
    document_id text        NOT NULL,
    run_id      integer     NOT NULL,
    version     integer     NOT NULL,
    owner       text,
    status      text        NOT NULL,
    accepted_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);

-- The transactional outbox: one row per accepted change, same transaction.
-- Within one document, id order is version order: version N+1 can only be
-- inserted after the transaction of version N committed (the state row lock).
CREATE TABLE handoff.outbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text        NOT NULL,
    document_id  text        NOT NULL,
    run_id       integer     NOT NULL,
    version      integer     NOT NULL,
    event_id     text        NOT NULL,
    event_type   text        NOT NULL,
    -- Relays divide the work by slot, a stable hash of the document (256
    -- slots; handoff/relay/slots.py): one relay at a time owns a slot, so
    -- one document's events are published by one relay, in order.
    slot         smallint    NOT NULL GENERATED ALWAYS AS
                     ((hashtextextended(tenant_id || '/' || document_id, 0) & 255)::smallint) STORED,
    payload      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    -- A row the relay cannot serialise is parked with its reason; it holds
    -- back only its own document's later rows.
    parked_at    timestamptz,
    park_reason  text
    -- No UNIQUE (tenant, document, run, version): one row per version is
    -- structural (the state row's version moves once per transaction), and
    -- that index made every emit and every relay mark pay one more index
    -- insert (marking cost 35 -> 22 us per row without it, measured).
);
-- In id order, with the slot test inside the index: a relay walks pending
-- rows oldest first and skips other relays' slots without heap visits.
CREATE INDEX outbox_pending ON handoff.outbox (id, slot)
    WHERE published_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_parked ON handoff.outbox (tenant_id, document_id)
    WHERE parked_at IS NOT NULL;
-- For the retention purge: a row is purgeable only if created (and so
-- published) before the window, and BRIN finds those old block ranges
-- without a scan of the table. BRIN is a summarising index: unlike a btree
-- on published_at, it adds nothing to each relay mark.
CREATE INDEX outbox_created_brin ON handoff.outbox USING brin (created_at);
-- Every relay mark leaves a dead row version and a dead entry in the
-- pending index, which fetches must step over until vacuum removes them:
-- vacuum this table early and without throttling, not at 20% dead rows.
ALTER TABLE handoff.outbox SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02
);

-- Set by a relay that found nothing to publish and is about to wait for a
-- NOTIFY. Emits notify only while it is set: PostgreSQL serialises the
-- commits of notifying transactions on one lock, and a NOTIFY in every emit
-- cost 35% of emit throughput at 8 clients and 61% at 32 (measured).
CREATE TABLE handoff.relay_wakeup (
    id      boolean PRIMARY KEY DEFAULT true CHECK (id),
    waiting boolean NOT NULL DEFAULT false
);
INSERT INTO handoff.relay_wakeup DEFAULT VALUES;

-- Every rejected attempt, for troubleshooting. Never changes anything else.
CREATE TABLE handoff.rejections (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        text        NOT NULL,
    document_id      text,
    run_id           integer,
    event_id         text,
    event_type       text,
    sender           text        NOT NULL,
    code             text        NOT NULL,
    message          text        NOT NULL,
    expected_version integer,
    current_version  integer,
    current_owner    text,
    requested_owner  text,
    status           text,
    rejected_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rejections_by_document ON handoff.rejections (tenant_id, document_id, id);

-- Records a rejection and answers it. Rejections are returned, not raised, so
-- this row commits while the state, counts and outbox stay as they were.
CREATE FUNCTION handoff._reject(
    p_tenant text, p_sender text, p_request jsonb, p_code text, p_message text,
    p_current_version integer, p_current_owner text
) RETURNS jsonb
LANGUAGE sql
AS $$
    INSERT INTO handoff.rejections (tenant_id, document_id, run_id, event_id, event_type, sender, code,
                            message, expected_version, current_version, current_owner,
                            requested_owner, status)
    VALUES (p_tenant, p_request->>'documentId', (p_request->>'runId')::integer,
            p_request->>'eventId', p_request->>'eventType', p_sender, p_code, p_message,
            (p_request->>'expectedVersion')::integer, p_current_version, p_current_owner,
            p_request->>'nextOwner', p_request->>'status');
    SELECT jsonb_build_object('accepted', false, 'code', p_code, 'message', p_message,
                              'currentVersion', p_current_version, 'currentOwner', p_current_owner);
$$;

-- The answer for an event id that already has a receipt (NULL if none):
-- the original receipt for the identical request, else a recorded
-- ConflictingEventReuse.
CREATE FUNCTION handoff._replay(
    p_tenant text, p_sender text, p_request jsonb, p_fingerprint bytea
) RETURNS jsonb
LANGUAGE sql
AS $$
    SELECT CASE WHEN r.fingerprint = p_fingerprint THEN
        jsonb_build_object('accepted', true, 'replayed', true, 'receipt', jsonb_build_object(
            'eventId', r.event_id, 'documentId', r.document_id, 'runId', r.run_id,
            'version', r.version, 'owner', r.owner, 'status', r.status,
            'acceptedAt', r.accepted_at))
    ELSE
        handoff._reject(p_tenant, p_sender, p_request, 'ConflictingEventReuse',
                format('event id %s was already accepted with different content '
                       '(document %s version %s); mint a new event id for a new change',
                       r.event_id, r.document_id, r.version),
                NULL, NULL)
    END
      FROM handoff.receipts r
     WHERE r.tenant_id = p_tenant AND r.event_id = p_request->>'eventId';
$$;

-- Microseconds since the epoch (Avro timestamp-micros), NULL stays NULL.
CREATE FUNCTION handoff._micros(p_at timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (extract(epoch FROM p_at) * 1000000)::bigint;

-- Adds delta to one shard of an owner's count.
CREATE FUNCTION handoff._count(p_tenant text, p_owner text, p_shard smallint, p_delta integer)
RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO handoff.owner_counts AS c (tenant_id, owner, shard, assigned)
    VALUES (p_tenant, p_owner, p_shard, p_delta)
    ON CONFLICT (tenant_id, owner, shard) DO UPDATE SET assigned = c.assigned + EXCLUDED.assigned;
$$;

-- The emit transaction, every rule of DESIGN.md "The emit contract", in one
-- statement so an emit costs one database round trip. It joins the caller's
-- transaction: called in autocommit it is its own; called by a consumer it
-- commits or rolls back with the consumer's guard and effect.
--   p_kind: 'create' (initial assignment), 'run' (new run of a finished
--   document), 'handoff' (handoff, progress or completion).
CREATE FUNCTION handoff._emit(
    p_tenant text, p_service text, p_can_create boolean, p_kind text, p_claimed_sender text,
    p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_next_owner text, p_status text, p_expected_version integer, p_due_at timestamptz,
    p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS jsonb
LANGUAGE plpgsql
-- No SET clauses (search_path, timezone): each one costs a configuration
-- save and restore on every call. Names are schema-qualified instead.
AS $$
DECLARE
    v_now        timestamptz := now();
    v_shard      smallint := (pg_backend_pid() % 16)::smallint;
    v_request    jsonb;
    v_fp         bytea;
    v_state      handoff.document_state;
    v_prev_owner text;
    v_answer     jsonb;
    v_run        integer;
BEGIN
    -- Direct SQL callers skip the Python models: check the essentials here too.
    IF p_kind IS NULL OR p_kind NOT IN ('create', 'run', 'handoff') THEN
        RAISE EXCEPTION 'kind must be create, run or handoff' USING ERRCODE = '22023';
    END IF;
    IF coalesce(p_event_id, '') = '' OR coalesce(p_document_id, '') = ''
       OR coalesce(p_status, '') = '' OR coalesce(p_event_type, '') = '' THEN
        RAISE EXCEPTION 'eventId, eventType, documentId and status are required'
            USING ERRCODE = '22023';
    END IF;
    IF p_kind <> 'handoff' AND coalesce(p_next_owner, '') = '' THEN
        RAISE EXCEPTION 'owner is required' USING ERRCODE = '22023';
    END IF;
    IF p_kind = 'handoff' AND (p_expected_version IS NULL OR p_expected_version < 1) THEN
        RAISE EXCEPTION 'expectedVersion (>= 1) is required' USING ERRCODE = '22023';
    END IF;
    IF p_data IS NOT NULL AND jsonb_typeof(p_data) <> 'object' THEN
        RAISE EXCEPTION 'data must be a JSON object' USING ERRCODE = '22023';
    END IF;

    v_request := jsonb_build_object(
        'kind', p_kind, 'eventId', p_event_id, 'eventType', p_event_type,
        'documentId', p_document_id, 'runId', p_run_id, 'sender', p_service,
        'nextOwner', p_next_owner, 'status', p_status, 'expectedVersion', p_expected_version,
        -- an instant, not its rendering: the same request from sessions in
        -- other time zones must have the same fingerprint
        'dueAt', extract(epoch FROM p_due_at), 'data', p_data,
        'correlationId', p_correlation_id, 'causationId', p_causation_id);
    -- jsonb text is canonical (sorted keys, fixed spacing), so equal requests hash equal.
    v_fp := sha256(convert_to(v_request::text, 'UTF8'));

    -- 1. The sender is the authenticated caller's service.
    IF p_claimed_sender IS NOT NULL AND p_claimed_sender <> p_service THEN
        RETURN handoff._reject(p_tenant, p_service, v_request, 'SenderMismatch',
                       format('sender %s is not the authenticated service %s',
                              p_claimed_sender, p_service), NULL, NULL);
    END IF;

    -- 2. A stored receipt answers, whatever happened to the document since.
    v_answer := handoff._replay(p_tenant, p_service, v_request, v_fp);
    IF v_answer IS NOT NULL THEN
        RETURN v_answer;
    END IF;

    IF p_kind IN ('create', 'run') THEN
        -- 3. Creation: only permitted services, only if the state does not exist.
        IF NOT p_can_create THEN
            RETURN handoff._reject(p_tenant, p_service, v_request, 'NotPermitted',
                           format('service %s may not create documents', p_service), NULL, NULL);
        END IF;
        IF p_kind = 'create' THEN
            v_run := 1;
        ELSE
            -- A new run starts only after the latest one finished; the row
            -- lock makes concurrent starts queue, and the loser finds run+1.
            SELECT * INTO v_state FROM handoff.document_state
             WHERE tenant_id = p_tenant AND document_id = p_document_id
             ORDER BY run_id DESC LIMIT 1 FOR UPDATE;
            IF NOT FOUND THEN
                RETURN handoff._reject(p_tenant, p_service, v_request, 'DocumentNotFound',
                               format('document %s does not exist', p_document_id), NULL, NULL);
            END IF;
            IF v_state.owner IS NOT NULL THEN
                RETURN handoff._reject(p_tenant, p_service, v_request, 'RunInProgress',
                               format('run %s of %s is still owned by %s; it must finish first',
                                      v_state.run_id, p_document_id, v_state.owner),
                               v_state.version, v_state.owner);
            END IF;
            v_run := v_state.run_id + 1;
        END IF;
        INSERT INTO handoff.document_state (tenant_id, document_id, run_id, owner, status, version,
                                            assigned_at, due_at, created_at, updated_at, data)
        VALUES (p_tenant, p_document_id, v_run, p_next_owner, p_status, 1,
                v_now, p_due_at, v_now, v_now, coalesce(p_data, '{}'::jsonb))
        ON CONFLICT DO NOTHING
        RETURNING * INTO v_state;
        IF NOT FOUND THEN
            -- A concurrent identical request may have won: its receipt answers.
            v_answer := handoff._replay(p_tenant, p_service, v_request, v_fp);
            IF v_answer IS NOT NULL THEN
                RETURN v_answer;
            END IF;
            SELECT * INTO v_state FROM handoff.document_state
             WHERE tenant_id = p_tenant AND document_id = p_document_id
             ORDER BY run_id DESC LIMIT 1;
            RETURN handoff._reject(p_tenant, p_service, v_request, 'AlreadyExists',
                           format('document %s already exists (run %s)', p_document_id,
                                  v_state.run_id), v_state.version, v_state.owner);
        END IF;
        v_prev_owner := NULL;
    ELSE
        -- 4. Handoff, progress or completion: the conditions are part of the
        -- UPDATE, so concurrent calls cannot both advance one version.
        UPDATE handoff.document_state s SET
            owner        = p_next_owner,
            status       = p_status,
            version      = s.version + 1,
            -- a new assignment begins only when the owner changes
            assigned_at  = CASE WHEN p_next_owner IS NULL THEN NULL
                                WHEN p_next_owner = p_service THEN s.assigned_at
                                ELSE v_now END,
            due_at       = CASE WHEN p_next_owner IS NULL THEN NULL
                                WHEN p_next_owner = p_service THEN coalesce(p_due_at, s.due_at)
                                ELSE p_due_at END,
            updated_at   = v_now,
            completed_at = CASE WHEN p_next_owner IS NULL THEN v_now END,
            data         = s.data || coalesce(p_data, '{}'::jsonb)
         WHERE s.tenant_id = p_tenant AND s.document_id = p_document_id
           AND s.run_id = coalesce(p_run_id, (SELECT max(run_id) FROM handoff.document_state
                                               WHERE tenant_id = p_tenant
                                                 AND document_id = p_document_id))
           AND s.owner = p_service
           AND s.version = p_expected_version
        RETURNING s.* INTO v_state;
        IF NOT FOUND THEN
            -- An identical request that committed while we waited on the row
            -- lock: answer with its receipt, not with a version mismatch.
            v_answer := handoff._replay(p_tenant, p_service, v_request, v_fp);
            IF v_answer IS NOT NULL THEN
                RETURN v_answer;
            END IF;
            SELECT * INTO v_state FROM handoff.document_state
             WHERE tenant_id = p_tenant AND document_id = p_document_id
               AND run_id = coalesce(p_run_id, (SELECT max(run_id) FROM handoff.document_state
                                                 WHERE tenant_id = p_tenant
                                                   AND document_id = p_document_id));
            IF NOT FOUND THEN
                RETURN handoff._reject(p_tenant, p_service, v_request, 'DocumentNotFound',
                               format('document %s%s does not exist', p_document_id,
                                      coalesce(' run ' || p_run_id, '')), NULL, NULL);
            ELSIF v_state.owner IS DISTINCT FROM p_service THEN
                RETURN handoff._reject(p_tenant, p_service, v_request, 'OwnershipMismatch',
                               format('%s is owned by %s, not by %s', p_document_id,
                                      coalesce(v_state.owner, 'nobody (finished)'), p_service),
                               v_state.version, v_state.owner);
            ELSE
                RETURN handoff._reject(p_tenant, p_service, v_request, 'VersionMismatch',
                               format('%s is at version %s, not %s', p_document_id,
                                      v_state.version, p_expected_version),
                               v_state.version, v_state.owner);
            END IF;
        END IF;
        v_prev_owner := p_service;
    END IF;

    -- 5. History, handoff.outbox and receipt, in the same transaction.
    INSERT INTO handoff.document_history (tenant_id, document_id, run_id, version, event_id, event_type,
                                  sender, owner_before, owner_after, status, accepted_at,
                                  assigned_at, due_at, data, correlation_id, causation_id)
    VALUES (p_tenant, p_document_id, v_state.run_id, v_state.version, p_event_id, p_event_type,
            p_service, v_prev_owner, v_state.owner, v_state.status, v_now, v_state.assigned_at,
            v_state.due_at, coalesce(p_data, '{}'::jsonb), p_correlation_id, p_causation_id);

    -- The payload is the event envelope, ready for the Avro writer: the
    -- timestamps are microseconds since the epoch (Avro's timestamp-micros),
    -- so the relay converts no dates on its hot path.
    INSERT INTO handoff.outbox (tenant_id, document_id, run_id, version, event_id, event_type, payload)
    VALUES (p_tenant, p_document_id, v_state.run_id, v_state.version, p_event_id, p_event_type,
            jsonb_build_object(
                'eventId', p_event_id, 'eventType', p_event_type,
                'source', p_service, 'occurredAt', handoff._micros(v_now), 'tenantId', p_tenant,
                'documentId', p_document_id, 'runId', v_state.run_id,
                'version', v_state.version, 'correlationId', p_correlation_id,
                'causationId', p_causation_id, 'owner', v_state.owner,
                'previousOwner', v_prev_owner, 'status', v_state.status,
                'assignedAt', handoff._micros(v_state.assigned_at),
                'dueAt', handoff._micros(v_state.due_at),
                'completed', v_state.owner IS NULL,
                'completedAt', handoff._micros(v_state.completed_at),
                'data', v_state.data));

    INSERT INTO handoff.receipts (tenant_id, event_id, fingerprint, document_id, run_id, version, owner,
                          status, accepted_at)
    VALUES (p_tenant, p_event_id, v_fp, p_document_id, v_state.run_id, v_state.version,
            v_state.owner, v_state.status, v_now)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        -- The same event id was committed for another change while we ran
        -- (another document, say). Undo all of this one; the caller's retry
        -- of the identical request then meets that receipt and is answered.
        RAISE EXCEPTION 'event id % was accepted concurrently; retry the identical request',
            p_event_id USING ERRCODE = '40001';
    END IF;

    -- 6. Counts last, so their row locks are held only until commit, and in
    -- one global order (owner, then shard): a crossing A->B and B->A would
    -- otherwise lock the same two rows in opposite orders and deadlock.
    IF v_prev_owner IS NULL THEN                    -- created: a first assignment
        PERFORM handoff._count(p_tenant, v_state.owner, v_shard, 1);
    ELSIF v_state.owner IS NULL THEN                -- completed: the assignment ends
        PERFORM handoff._count(p_tenant, v_prev_owner, v_shard, -1);
    ELSIF v_prev_owner = v_state.owner THEN         -- progress: counts unchanged
        NULL;
    ELSIF v_prev_owner COLLATE "C" < v_state.owner COLLATE "C" THEN
        PERFORM handoff._count(p_tenant, v_prev_owner, v_shard, -1);
        PERFORM handoff._count(p_tenant, v_state.owner, v_shard, 1);
    ELSE
        PERFORM handoff._count(p_tenant, v_state.owner, v_shard, 1);
        PERFORM handoff._count(p_tenant, v_prev_owner, v_shard, -1);
    END IF;

    -- 7. Wake an idle relay (see relay_wakeup); busy relays poll on their own.
    IF (SELECT waiting FROM handoff.relay_wakeup) THEN
        UPDATE handoff.relay_wakeup SET waiting = false WHERE waiting;
        IF FOUND THEN
            PERFORM pg_notify('handoff_outbox', '');
        END IF;
    END IF;

    RETURN jsonb_build_object('accepted', true, 'replayed', false, 'receipt', jsonb_build_object(
        'eventId', p_event_id, 'documentId', p_document_id, 'runId', v_state.run_id,
        'version', v_state.version, 'owner', v_state.owner, 'status', v_state.status,
        'acceptedAt', v_now));
END
$$;

-- Direct mode: the service is the session's login role, so no service can
-- emit as another even with plain SQL (service roles may run only this).
CREATE FUNCTION handoff.emit_direct(
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
    SELECT * INTO v FROM services WHERE db_role = session_user;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'database role % is not a Handoff service', session_user
            USING ERRCODE = '28000';
    END IF;
    RETURN _emit(v.tenant_id, v.name, v.can_create, p_kind, p_sender, p_event_id, p_event_type,
                 p_document_id, p_run_id, p_next_owner, p_status, p_expected_version, p_due_at,
                 p_data, p_correlation_id, p_causation_id);
END
$$;

-- HTTP mode: the API server passes the bearer credential; it is checked in
-- the same statement, so authentication costs no extra round trip.
CREATE FUNCTION handoff.emit_http(
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
    SELECT * INTO v FROM handoff.services WHERE db_role = p_credential_role;
    IF NOT FOUND OR v.secret_hash <> p_secret_hash THEN
        RETURN jsonb_build_object('accepted', false, 'code', 'Unauthenticated',
                                  'message', 'unknown or revoked service credential');
    END IF;
    RETURN handoff._emit(v.tenant_id, v.name, v.can_create, p_kind, p_sender, p_event_id, p_event_type,
                 p_document_id, p_run_id, p_next_owner, p_status, p_expected_version, p_due_at,
                 p_data, p_correlation_id, p_causation_id);
END
$$;

REVOKE ALL ON FUNCTION handoff._reject, handoff._replay, handoff._count, handoff._micros, handoff._emit,
                       handoff.emit_http, handoff.emit_direct FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.emit_direct TO handoff_service;
