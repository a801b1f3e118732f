-- The emit contract (DESIGN.md "The emit contract"): the naming rule's
-- checks, the owner counters, receipts and rejections, and the emit itself.
-- _emit checks a request's names, instants and next owner; _emit_contract
-- applies the contract's rules in one statement; emit_direct (a service's
-- own session) and emit_http (the API server, with the caller's credential)
-- are its two doors.
--
-- Each function as the database holds it after `handoff db upgrade`, with
-- the why of it: tests/integration/contract/test_sql_functions.py applies
-- this file to an upgraded database and checks that no definition changes.
-- Only the migration that changes a function applies its family's file
-- (handoff/migrations/helpers.py apply_family); grants and tables stay in
-- the migrations, and old databases still upgrade step by step.

-- The naming rule of handoff/core/names.py, for callers that skip the Python
-- models (direct SQL). The character class is FORBIDDEN_RANGES of names.py
-- (PostgreSQL text holds neither NUL nor surrogates, so those are left out);
-- tests/integration/contract/test_hardening.py compares the two code point by
-- code point. NULL means "no problem".
CREATE OR REPLACE FUNCTION handoff._id_problem(p text, p_what text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN p IS NULL THEN NULL
    WHEN char_length(p) NOT BETWEEN 1 AND 200 THEN p_what || ' must be 1-200 characters'
    WHEN p ~ '[\u0020\u0001-\u001F\u007F-\u00A0\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u1680\u180E\u2000-\u200F\u2028-\u202F\u205F-\u2064\u2066-\u206F\u3000\uE000-\uF8FF\uFDD0-\uFDEF\uFEFF\uFFF9-\uFFFB\uFFFE-\uFFFF\U000110BD\U000110CD\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U0001FFFE-\U0001FFFF\U0002FFFE-\U0002FFFF\U0003FFFE-\U0003FFFF\U0004FFFE-\U0004FFFF\U0005FFFE-\U0005FFFF\U0006FFFE-\U0006FFFF\U0007FFFE-\U0007FFFF\U0008FFFE-\U0008FFFF\U0009FFFE-\U0009FFFF\U000AFFFE-\U000AFFFF\U000BFFFE-\U000BFFFF\U000CFFFE-\U000CFFFF\U000DFFFE-\U000DFFFF\U000E0001\U000E0020-\U000E007F\U000EFFFE-\U0010FFFF/]' THEN
        p_what || ' must not contain whitespace, control or formatting characters or ''/'''
    WHEN p IN ('.', '..') THEN p_what || ' must not be ''.'' or ''..'''
    WHEN NOT p IS NFC NORMALIZED THEN p_what || ' must be in Unicode NFC form'
END;

CREATE OR REPLACE FUNCTION handoff._label_problem(p text, p_what text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN p IS NULL THEN NULL
    WHEN char_length(p) NOT BETWEEN 1 AND 64 THEN p_what || ' must be 1-64 characters'
    WHEN p LIKE ' %' OR p LIKE '% ' THEN p_what || ' must not start or end with a space'
    WHEN p ~ '[\u0001-\u001F\u007F-\u00A0\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u1680\u180E\u2000-\u200F\u2028-\u202F\u205F-\u2064\u2066-\u206F\u3000\uE000-\uF8FF\uFDD0-\uFDEF\uFEFF\uFFF9-\uFFFB\uFFFE-\uFFFF\U000110BD\U000110CD\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U0001FFFE-\U0001FFFF\U0002FFFE-\U0002FFFF\U0003FFFE-\U0003FFFF\U0004FFFE-\U0004FFFF\U0005FFFE-\U0005FFFF\U0006FFFE-\U0006FFFF\U0007FFFE-\U0007FFFF\U0008FFFE-\U0008FFFF\U0009FFFE-\U0009FFFF\U000AFFFE-\U000AFFFF\U000BFFFE-\U000BFFFF\U000CFFFE-\U000CFFFF\U000DFFFE-\U000DFFFF\U000E0001\U000E0020-\U000E007F\U000EFFFE-\U0010FFFF]' THEN p_what || ' must not contain control or formatting characters'
    WHEN NOT p IS NFC NORMALIZED THEN p_what || ' must be in Unicode NFC form'
END;

-- Every accepted instant stays readable everywhere (models.py EARLIEST/LATEST).
CREATE OR REPLACE FUNCTION handoff._instant_problem(p timestamptz, p_what text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN p NOT BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 23:59:59.999999+00' THEN
        p_what || ' must be between 0001-01-02T00:00:00Z and 9999-12-30T23:59:59.999999Z'
END;

-- Microseconds since the epoch (Avro timestamp-micros), NULL stays NULL.
--
-- Why the epoch is subtracted first: extract(epoch FROM timestamptz) is
-- declared STABLE (other fields depend on the time zone), and PostgreSQL
-- inlines an IMMUTABLE SQL function only if its body is immutable too. Not
-- inlined, each of the outbox payload's four calls ran as a SQL function with
-- an executor of its own, on every emit: 2% of an emit's server CPU (perf,
-- 2026-12-07). timestamptz - timestamptz and extract from an interval are
-- immutable, and give the same microseconds over the whole accepted range.
CREATE OR REPLACE FUNCTION handoff._micros(p_at timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (extract(epoch FROM p_at
                - timestamptz '1970-01-01 00:00:00+00'  -- since 0032_micros_inlined
       ) * 1000000)::bigint;

-- The advisory lock key of one service (one bigint key space, apart from
-- the relays' two-integer slot locks).
CREATE OR REPLACE FUNCTION handoff._service_lock(p_tenant text, p_name text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended(p_tenant || '/' || p_name, 18543);

-- Moves one assignment's count from p_from to p_to: a first assignment when
-- p_from is NULL, a completion when p_to is NULL, nothing for progress (the
-- two equal). Each owner counts in the first shard from p_shard on that no
-- other transaction is counting in. Returns how many count rows it wrote.
--
-- Why not simply p_shard (the backend's): a shard's row stays locked until
-- its transaction commits, and a consumer's unit commits only after the rest
-- of its batch and its effects. Two sessions whose backends share a shard
-- (pid % 16) then queue behind each other for the length of a unit: measured,
-- an API emit waited on a consumer's batch for a median 0.5 ms and a hop's
-- p99 went from tens of milliseconds to seconds, depending on which pids the
-- sessions drew. A transaction-scoped advisory lock per (owner, shard), taken
-- without waiting, says which shards are free; only the holder of a shard's
-- lock writes its row, so emits never wait for each other's counts. With all
-- 16 taken (16 transactions counting one owner at once) the last waits on its
-- own shard, as before. The lock keys are hashes seeded 1000 + shard, apart
-- from _service_lock's seed; a clash with another key only moves the count on
-- to the next shard. Re-taking a lock the transaction holds succeeds, so a
-- batch keeps counting in the shard it took first.
--
-- The rows are written in one global order, owner (then shard): a crossing
-- A->B and B->A would otherwise lock the same two rows in opposite orders and
-- deadlock. Why both owners in one call and one INSERT: every PL/pgSQL call
-- and every statement starts an executor, and an emit's statements are most
-- of its cost. Until 0027 a handoff made two calls of a one-owner function
-- through PERFORM (each a statement of its own) and two INSERTs; this is one
-- call as an assignment and one INSERT. Measured (pgbench, the emit at 8
-- clients, alternating), PostgreSQL spent about 8% less CPU per emit.
CREATE OR REPLACE FUNCTION handoff._counts(p_tenant text, p_from text, p_to text, p_shard smallint)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_owners text[] := ARRAY[p_from, p_to];
    v_shards smallint[] := ARRAY[p_shard, p_shard];  -- all taken: wait on the backend's own
BEGIN
    IF p_from IS NOT DISTINCT FROM p_to THEN
        RETURN 0;
    END IF;
    IF p_from IS NULL OR p_to COLLATE "C" < p_from COLLATE "C" THEN
        v_owners := ARRAY[p_to, p_from];  -- the first is never NULL, the second may be
    END IF;
    FOR o IN 1..2 LOOP
        EXIT WHEN v_owners[o] IS NULL;
        FOR i IN 0..15 LOOP
            IF pg_try_advisory_xact_lock(
                   hashtextextended(p_tenant || '/' || v_owners[o], 1000 + (p_shard + i) % 16)) THEN
                v_shards[o] := ((p_shard + i) % 16)::smallint;
                EXIT;
            END IF;
        END LOOP;
    END LOOP;
    IF v_owners[2] IS NULL THEN
        INSERT INTO handoff.owner_counts AS c (tenant_id, owner, shard, assigned)
        VALUES (p_tenant, v_owners[1], v_shards[1], CASE WHEN p_to IS NULL THEN -1 ELSE 1 END)
        ON CONFLICT (tenant_id, owner, shard) DO UPDATE SET assigned = c.assigned + EXCLUDED.assigned;
        RETURN 1;
    END IF;
    INSERT INTO handoff.owner_counts AS c (tenant_id, owner, shard, assigned)
    VALUES (p_tenant, v_owners[1], v_shards[1], CASE WHEN v_owners[1] = p_to THEN 1 ELSE -1 END),
           (p_tenant, v_owners[2], v_shards[2], CASE WHEN v_owners[2] = p_to THEN 1 ELSE -1 END)
    ON CONFLICT (tenant_id, owner, shard) DO UPDATE SET assigned = c.assigned + EXCLUDED.assigned;
    RETURN 2;
END
$$;

-- Records a rejection and answers it. Rejections are returned, not raised, so
-- this row commits while the state, counts and outbox stay as they were.
CREATE OR REPLACE FUNCTION handoff._reject(
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
CREATE OR REPLACE FUNCTION handoff._replay(
    p_tenant text, p_sender text, p_request jsonb, p_fingerprint bytea
) RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    r handoff.receipts;
BEGIN
    -- The receipt is read first and the rejection recorded after, not in one
    -- query: on Citus a function in a query's select list goes down to the
    -- shard with the query, and one that writes another table from there is
    -- a nested distributed query, which Citus refuses.
    SELECT * INTO r FROM handoff.receipts
     WHERE tenant_id = p_tenant AND event_id = p_request->>'eventId';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.fingerprint = p_fingerprint THEN
        RETURN jsonb_build_object('accepted', true, 'replayed', true, 'receipt', jsonb_build_object(
            'eventId', r.event_id, 'documentId', r.document_id, 'runId', r.run_id,
            'version', r.version, 'owner', r.owner, 'status', r.status,
            'acceptedAt', r.accepted_at));
    END IF;
    RETURN handoff._reject(p_tenant, p_sender, p_request, 'ConflictingEventReuse',
        format('event id %s was already accepted with different content '
               '(document %s version %s); mint a new event id for a new change',
               r.event_id, r.document_id, r.version),
        NULL, NULL);
END
$$;

-- The emit transaction, every rule of DESIGN.md "The emit contract", in one
-- statement so an emit costs one database round trip. It joins the caller's
-- transaction: called in autocommit it is its own; called by a consumer it
-- commits or rolls back with the consumer's guard and effect.
--   p_kind: 'create' (initial assignment), 'run' (new run of a finished
--   document), 'handoff' (handoff, progress or completion).
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
    v_counted    integer;  -- count rows written (_counts)
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
    -- Looked for here, and _replay called only when there is one: a call is an
    -- executor start on every emit (see _counts).
    IF EXISTS (SELECT FROM handoff.receipts WHERE tenant_id = p_tenant AND event_id = p_event_id) THEN
        v_answer := handoff._replay(p_tenant, p_service, v_request, v_fp);
        IF v_answer IS NOT NULL THEN
            RETURN v_answer;
        END IF;
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

    -- 6. Counts last, so their row locks are held only until commit.
    v_counted := handoff._counts(p_tenant, v_prev_owner, v_state.owner, v_shard);

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

-- Every door's checks before the contract: a request's names and instants
-- (22H00), then a next owner that is a service of the tenant. Apart from
-- _emit_contract because they are about the request and the tenant; the
-- contract's rules are about the document.
CREATE OR REPLACE FUNCTION handoff._emit(
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
        -- Two statements: on Citus a call forced to the tenant's worker may only run
        -- statements routed by its tenant, which one reading the reference table of
        -- services together with receipts is not (by_tenant.sql).
        IF NOT EXISTS (SELECT 1 FROM handoff.services
                        WHERE tenant_id = p_tenant AND name = p_next_owner) THEN
            -- an identical retry of an accepted request still gets its receipt
            IF NOT EXISTS (SELECT 1 FROM handoff.receipts
                            WHERE tenant_id = p_tenant AND event_id = p_event_id) THEN
                RETURN handoff._reject(p_tenant, p_service, jsonb_build_object(
                        'eventId', p_event_id, 'eventType', p_event_type,
                        'documentId', p_document_id, 'runId', p_run_id,
                        'nextOwner', p_next_owner, 'status', p_status,
                        'expectedVersion', p_expected_version),
                    'UnknownOwner',
                    format('%s is not a service of tenant %s; register it first '
                           '(handoff service add %s --tenant %s)',
                           p_next_owner, p_tenant, p_next_owner, p_tenant),
                    NULL, NULL);
            END IF;
        END IF;
    END IF;
    RETURN handoff._emit_contract(p_tenant, p_service, p_can_create, p_kind, p_claimed_sender,
                                 p_event_id, p_event_type, p_document_id, p_run_id, p_next_owner,
                                 p_status, p_expected_version, p_due_at, p_data,
                                 p_correlation_id, p_causation_id);
END
$$;

-- A service's own session: its service is the session's login role
-- (_consumer, in consumers.sql; the db_role index serves the lookup).
CREATE OR REPLACE FUNCTION handoff.emit_direct(
    p_kind text, p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_sender text, p_next_owner text, p_status text, p_expected_version integer,
    p_due_at timestamptz, p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();  -- the session's service, or 28000
BEGIN
    RETURN _emit(v.tenant_id, v.name, v.can_create, p_kind, p_sender, p_event_id, p_event_type,
                 p_document_id, p_run_id, p_next_owner, p_status, p_expected_version, p_due_at,
                 p_data, p_correlation_id, p_causation_id);
END
$$;

-- An emit whose answer nobody waits for (HandoffTx.hand_on(..., wait=False)):
-- sent with the unit's other writes, in the message of its COMMIT. A refusal
-- raises (SQLSTATE P0H01, the answer as the message), so the unit fails
-- instead of committing without its handoff; core/db.py turns the answer
-- into the typed error a refused emit raises. The rejection row rolls back
-- with the unit, as it does when a consumer's handler raises a refusal.
CREATE OR REPLACE FUNCTION handoff.emit_direct_or_raise(
    p_kind text, p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_sender text, p_next_owner text, p_status text, p_expected_version integer,
    p_due_at timestamptz, p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_answer jsonb := handoff.emit_direct(p_kind, p_event_id, p_event_type, p_document_id,
                                          p_run_id, p_sender, p_next_owner, p_status,
                                          p_expected_version, p_due_at, p_data,
                                          p_correlation_id, p_causation_id);
BEGIN
    IF NOT (v_answer->>'accepted')::boolean THEN
        RAISE EXCEPTION '%', v_answer::text USING ERRCODE = 'P0H01';
    END IF;
END
$$;

-- HTTP mode: the API server passes the bearer credential; it is checked in
-- the same statement, so authentication costs no extra round trip.
CREATE OR REPLACE FUNCTION handoff.emit_http(
    p_credential_role text, p_secret_hash bytea,
    p_kind text, p_event_id text, p_event_type text, p_document_id text, p_run_id integer,
    p_sender text, p_next_owner text, p_status text, p_expected_version integer,
    p_due_at timestamptz, p_data jsonb, p_correlation_id text, p_causation_id text
) RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
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
