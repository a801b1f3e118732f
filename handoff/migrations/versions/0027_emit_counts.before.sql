-- handoff._count and handoff._emit_contract as 0017-0026 have them, and no _counts
-- (0027_emit_counts puts them back on downgrade; 0015, 0017, 0018, 0020 and 0021
-- apply this file after the contract family).

DROP FUNCTION IF EXISTS handoff._counts(text, text, text, smallint);

CREATE OR REPLACE FUNCTION handoff._count(p_tenant text, p_owner text, p_shard smallint, p_delta integer)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key   text := p_tenant || '/' || p_owner;
    v_shard smallint := p_shard;
BEGIN
    FOR i IN 0..15 LOOP
        v_shard := ((p_shard + i) % 16)::smallint;
        EXIT WHEN pg_try_advisory_xact_lock(hashtextextended(v_key, 1000 + v_shard));
        v_shard := p_shard;  -- all taken: wait on the backend's own
    END LOOP;
    INSERT INTO handoff.owner_counts AS c (tenant_id, owner, shard, assigned)
    VALUES (p_tenant, p_owner, v_shard, p_delta)
    ON CONFLICT (tenant_id, owner, shard) DO UPDATE SET assigned = c.assigned + EXCLUDED.assigned;
END
$$;

-- Internal (0001_contract), also when a downgrade creates it anew.
REVOKE ALL ON FUNCTION handoff._count(text, text, smallint, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION handoff._emit_contract(
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
        -- The owner is compared with IS NOT DISTINCT FROM (the same test here:
        -- p_service is never NULL) because no index can serve it: with "=",
        -- PL/pgSQL's generic plan found the row through document_state_by_owner
        -- (tenant, owner, then document_id past assigned_at), reading the whole
        -- of the sender's queue: 48 buffers for an owner of 3,000 documents,
        -- and more with every document it holds. The key finds it in 5.
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
           AND s.owner IS NOT DISTINCT FROM p_service
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
    -- This waits for the flag's holder (a consumer's unit that cleared it
    -- holds it to its commit). Taking it without waiting (SKIP LOCKED) here
    -- or in the relay's "waiting" update lost wake-ups: measured, rows then
    -- waited for the relay's 1 s poll (p99 emit -> fetch 0.8-1.0 s).
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
