-- The functions 0020_tenant_keys changes, as revisions 0018 and 0019 have them: 0018
-- applies today's family files and then this one, and 0020's downgrade puts them back
-- (handoff/migrations/README.md, the freezing rule). The SET lines that 0018 added
-- carry its mark, so 0018's downgrade applies this file without them.

CREATE OR REPLACE FUNCTION handoff.consumer_hold(
    p_reason text, p_event jsonb, p_key bytea, p_value bytea, p_headers jsonb,
    p_category text, p_error text, p_attempts integer, p_handler text, p_handler_version text,
    p_wait_s double precision
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v_me services := _consumer();
    v_id bigint;
BEGIN
    IF p_reason = 'quarantine' THEN
        UPDATE quarantine q SET attempts = q.attempts + p_attempts, last_failed_at = now(),
                                category = p_category, error = p_error, status = 'open',
                                handler = coalesce(p_handler, q.handler),
                                handler_version = coalesce(p_handler_version, q.handler_version)
         WHERE q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
           AND q.event_id = p_event->>'eventId' AND q.status IN ('open', 'retry')
        RETURNING q.id INTO v_id;
        IF FOUND THEN
            INSERT INTO quarantine_audit (quarantine_id, actor, action, detail)
            VALUES (v_id, v_me.name, 'failed again', p_category || ': ' || p_error);
            RETURN v_id;
        END IF;
        INSERT INTO quarantine (tenant_id, consumer, event_id, event_type, document_id, run_id,
                                version, topic, kafka_partition, kafka_offset, message_key,
                                message_value, headers, handler, handler_version, category,
                                error, attempts)
        VALUES (v_me.tenant_id, v_me.name, p_event->>'eventId', p_event->>'eventType',
                p_event->>'documentId', (p_event->>'runId')::integer,
                (p_event->>'version')::integer, p_event->>'topic',
                (p_event->>'partition')::integer, (p_event->>'offset')::bigint, p_key, p_value,
                coalesce(p_headers, '{}'), p_handler, p_handler_version, p_category, p_error,
                greatest(p_attempts, 1))
        RETURNING id INTO v_id;
        INSERT INTO quarantine_audit (quarantine_id, actor, action, detail)
        VALUES (v_id, v_me.name, 'quarantined', p_category || ': ' || p_error);
        RETURN v_id;
    END IF;
    IF p_reason NOT IN ('behind_quarantine', 'gap') THEN
        RAISE EXCEPTION 'unknown reason %', p_reason USING ERRCODE = '22023';
    END IF;
    INSERT INTO consumer_parked (tenant_id, consumer, event_id, document_id, run_id, version,
                                 topic, kafka_partition, kafka_offset, message_key,
                                 message_value, headers, reason, wait_until)
    VALUES (v_me.tenant_id, v_me.name, p_event->>'eventId', p_event->>'documentId',
            (p_event->>'runId')::integer, (p_event->>'version')::integer, p_event->>'topic',
            (p_event->>'partition')::integer, (p_event->>'offset')::bigint, p_key, p_value,
            coalesce(p_headers, '{}'), p_reason,
            CASE WHEN p_wait_s IS NOT NULL THEN now() + make_interval(secs => p_wait_s) END)
    ON CONFLICT (tenant_id, consumer, event_id) DO NOTHING
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION handoff.consumer_take(p_kind text, p_id bigint) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v_me services := _consumer();
BEGIN
    IF p_kind = 'parked' THEN
        DELETE FROM consumer_parked p
         WHERE p.id = p_id AND p.tenant_id = v_me.tenant_id AND p.consumer = v_me.name;
        RETURN FOUND;
    END IF;
    UPDATE quarantine q SET status = 'resolved', resolved_at = now()
     WHERE q.id = p_id AND q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
       AND q.status = 'retry';
    IF FOUND THEN
        INSERT INTO quarantine_audit (quarantine_id, actor, action, detail)
        VALUES (p_id, v_me.name, 'resolved', 'the retry went through the guard');
    END IF;
    RETURN FOUND;
END
$$;

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
        INSERT INTO effect_history (intent_id, actor, to_state, detail)
        VALUES (v_row.id, v.name, 'intended', 'recorded with event ' || p_event_id);
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

CREATE OR REPLACE FUNCTION handoff.effect_claim(
    p_worker text, p_lease_s double precision, p_limit integer, p_submit boolean
) RETURNS TABLE (id bigint, effect text, idempotency_key text, request jsonb, document_id text,
                 run_id integer, event_id text, claim integer, attempts integer, lookups integer,
                 needs_lookup boolean, submitted boolean, recovered text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
    v_ids bigint[];
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
    RETURN QUERY
    WITH ready AS (
        SELECT e.id, e.state AS was, e.claimed_by AS by, e.submitted_at IS NOT NULL AS sent,
               p_submit AND e.submitted_at IS NULL AS send
          FROM effect_intents e WHERE e.id = ANY (v_ids)
    ), taken AS (
        UPDATE effect_intents e
           SET state = CASE WHEN ready.send THEN 'submitted' ELSE 'claimed' END,
               attempts = e.attempts + CASE WHEN ready.send THEN 1 ELSE 0 END,
               submitted_at = CASE WHEN ready.send THEN now() ELSE e.submitted_at END,
               claim = e.claim + 1, claimed_by = p_worker,
               lease_until = now() + make_interval(secs => p_lease_s), updated_at = now()
          FROM ready
         WHERE e.id = ready.id
        RETURNING e.*, ready.was, ready.by, ready.sent, ready.send
    ), logged AS (
        INSERT INTO effect_history (intent_id, actor, from_state, to_state, detail)
        SELECT t.id, p_worker, t.was, t.state,
               concat_ws('; ', CASE WHEN t.was IN ('claimed', 'submitted')
                                    THEN 'lease of ' || t.by || ' expired' END,
                         CASE WHEN t.send THEN 'claimed, attempt ' || t.attempts END)
          FROM taken t
    )
    SELECT t.id, t.effect, t.idempotency_key, t.request, t.document_id, t.run_id, t.event_id,
           t.claim, t.attempts, t.lookups, t.sent, t.send,
           CASE WHEN t.was IN ('claimed', 'submitted') THEN t.by END
      FROM taken t;
END
$$;

CREATE OR REPLACE FUNCTION handoff.effect_submitting(p_id bigint, p_claim integer) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin in consumers.sql
AS $$
DECLARE
    v services := _consumer();
BEGIN
    UPDATE effect_intents e
       SET state = 'submitted', attempts = e.attempts + 1,
           submitted_at = coalesce(e.submitted_at, now()), updated_at = now()
     WHERE e.id = p_id AND e.claim = p_claim AND e.state = 'claimed'
       AND e.tenant_id = v.tenant_id AND e.consumer = v.name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO effect_history (intent_id, actor, from_state, to_state, detail)
    SELECT p_id, e.claimed_by, 'claimed', 'submitted', 'attempt ' || e.attempts
      FROM effect_intents e WHERE e.id = p_id;
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
           completed_at = CASE WHEN p_state IN ('succeeded', 'failed') THEN now() END,
           updated_at = now()
     WHERE e.id = p_id;
    INSERT INTO effect_history (intent_id, actor, from_state, to_state, detail)
    VALUES (p_id, v_by, v_was, p_state, p_detail);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION handoff.consumer_begin(
    p_events jsonb, p_types text[], p_owner text, p_reconcile boolean
) RETURNS TABLE (verdict text, detail text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: the comment above
AS $$
DECLARE
    v_me       services := _consumer();
    e          record;
    v_fp       bytea;
    v_old_fp   bytea;
    v_pos_run  integer;
    v_pos_ver  integer;
    v_state    integer;
    v_missing  text;
    -- Whether this consumer has any quarantined or parked work at all: when
    -- it has none (nearly always), no event pays the per-document lookups.
    v_blocked  boolean := EXISTS (SELECT 1 FROM quarantine q
                                   WHERE q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
                                     AND q.status IN ('open', 'retry'))
                       OR EXISTS (SELECT 1 FROM consumer_parked p
                                   WHERE p.tenant_id = v_me.tenant_id AND p.consumer = v_me.name);
BEGIN
    -- The fast path, for the usual batch: nothing set aside, each document
    -- once. One set-based statement judges every event on one snapshot and
    -- inserts the guard rows of those to act on (a fifth of the loop's server
    -- time, measured). An event whose guard row was already there, or was
    -- committed meanwhile by a concurrent taker, is skipped by the INSERT:
    -- its fingerprint is then read (a new statement sees that commit), so it
    -- is a duplicate or a conflict, never applied twice.
    -- (A single event takes the loop: its few small statements cost less
    -- than starting the set-based plan, measured.)
    IF NOT v_blocked AND jsonb_array_length(p_events) > 1
       AND (SELECT count(DISTINCT x."documentId") = count(*)
              FROM jsonb_to_recordset(p_events) AS x("documentId" text)) THEN
        FOR e IN
            WITH ev AS (
                SELECT x.event_id, decode(x.fingerprint, 'hex') AS fp, x.document_id, x.run_id,
                       x.version, x.n
                  FROM ROWS FROM (jsonb_to_recordset(p_events)
                                  AS ("eventId" text, fingerprint text, "documentId" text,
                                      "runId" integer, version integer))
                       WITH ORDINALITY AS x(event_id, fingerprint, document_id, run_id, version, n)
            ),
            judged AS (
                SELECT ev.*, pos.run_id AS pos_run,
                       CASE WHEN pos.run_id = ev.run_id THEN pos.version ELSE 0 END AS pos_ver,
                       pos.version AS pos_version, s.version AS state_ver
                  FROM ev
                  -- LATERAL ... LIMIT 1: one index probe per event (a plain
                  -- join may hash every state row of the tenant instead).
                  LEFT JOIN LATERAL (
                      SELECT g.run_id, g.version FROM consumer_guards g
                       WHERE g.tenant_id = v_me.tenant_id AND g.consumer = v_me.name
                         AND g.document_id = ev.document_id
                       ORDER BY g.run_id DESC, g.version DESC LIMIT 1) pos ON true
                  LEFT JOIN LATERAL (
                      SELECT d.version FROM document_state d
                       WHERE d.tenant_id = v_me.tenant_id AND d.document_id = ev.document_id
                         AND d.run_id = ev.run_id LIMIT 1) s ON true
            ),
            ruled AS (
                SELECT j.*, m.missing, CASE
                    WHEN j.pos_run > j.run_id OR (j.pos_run = j.run_id AND j.pos_ver >= j.version)
                        THEN 'stale'
                    WHEN j.state_ver IS NULL OR j.version > j.state_ver THEN 'future'
                    WHEN m.missing IS NOT NULL AND NOT p_reconcile THEN 'gap'
                    ELSE 'apply' END AS verdict
                  FROM judged j
                  LEFT JOIN LATERAL (
                      SELECT string_agg(h.version::text, ',' ORDER BY h.version) AS missing
                        FROM document_history h
                       WHERE j.version > j.pos_ver + 1
                         AND h.tenant_id = v_me.tenant_id AND h.document_id = j.document_id
                         AND h.run_id = j.run_id AND h.version > j.pos_ver
                         AND h.version < j.version AND h.event_type = ANY (p_types)
                         AND (p_owner IS NULL OR h.owner_after = p_owner)) m ON true
            ),
            taken AS (
                INSERT INTO consumer_guards (tenant_id, consumer, event_id, fingerprint,
                                             document_id, run_id, version)
                SELECT v_me.tenant_id, v_me.name, r.event_id, r.fp, r.document_id, r.run_id,
                       r.version
                  FROM ruled r WHERE r.verdict IN ('apply', 'stale')
                ON CONFLICT DO NOTHING
                RETURNING event_id
            )
            SELECT r.event_id, r.fp, r.verdict, t.event_id IS NOT NULL AS taken,
                   CASE r.verdict
                       WHEN 'stale' THEN format('position is run %s version %s', r.pos_run,
                                                r.pos_version)
                       WHEN 'future' THEN format('the database holds %s of run %s',
                                                 coalesce('version ' || r.state_ver, 'no state'),
                                                 r.run_id)
                       ELSE r.missing END AS detail
              FROM ruled r LEFT JOIN taken t ON t.event_id = r.event_id
             ORDER BY r.n
        LOOP
            verdict := e.verdict; detail := e.detail;
            IF e.verdict IN ('apply', 'stale') AND NOT e.taken THEN
                SELECT g.fingerprint INTO v_old_fp FROM consumer_guards g
                 WHERE g.tenant_id = v_me.tenant_id AND g.consumer = v_me.name
                   AND g.event_id = e.event_id;
                verdict := CASE WHEN v_old_fp = e.fp THEN 'duplicate' ELSE 'conflict' END;
                detail := NULL;
            END IF;
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;

    -- The general path, one event at a time, in order: documents that occur
    -- more than once (each event moves the position the next one is judged
    -- by), and consumers with set-aside work.
    FOR e IN SELECT * FROM jsonb_to_recordset(p_events)
                 AS x("eventId" text, fingerprint text, "documentId" text, "runId" integer,
                      version integer)
    LOOP
        v_fp := decode(e.fingerprint, 'hex');
        IF v_blocked THEN
            IF EXISTS (SELECT 1 FROM quarantine q
                        WHERE q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
                          AND q.event_id = e."eventId" AND q.status IN ('open', 'retry'))
               OR EXISTS (SELECT 1 FROM consumer_parked p
                           WHERE p.tenant_id = v_me.tenant_id AND p.consumer = v_me.name
                             AND p.event_id = e."eventId") THEN
                verdict := 'held'; detail := NULL; RETURN NEXT; CONTINUE;
            END IF;
            IF EXISTS (SELECT 1 FROM quarantine q
                        WHERE q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
                          AND q.document_id = e."documentId" AND q.status IN ('open', 'retry'))
               OR EXISTS (SELECT 1 FROM consumer_parked p
                           WHERE p.tenant_id = v_me.tenant_id AND p.consumer = v_me.name
                             AND p.document_id = e."documentId"
                             AND (p.run_id, p.version) < (e."runId", e.version)) THEN
                verdict := 'park'; detail := NULL; RETURN NEXT; CONTINUE;
            END IF;
        END IF;

        -- The guard. ON CONFLICT DO NOTHING waits for a concurrent insert of
        -- the same key to commit or roll back, then decides: two processes
        -- given the same event cannot both see it as new. A lock timeout or
        -- a serialization failure raises; it is never read as "duplicate".
        INSERT INTO consumer_guards AS g (tenant_id, consumer, event_id, fingerprint, document_id,
                                          run_id, version)
        VALUES (v_me.tenant_id, v_me.name, e."eventId", v_fp, e."documentId", e."runId", e.version)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT g.fingerprint INTO v_old_fp FROM consumer_guards g
             WHERE g.tenant_id = v_me.tenant_id AND g.consumer = v_me.name
               AND g.event_id = e."eventId";
            verdict := CASE WHEN v_old_fp = v_fp THEN 'duplicate' ELSE 'conflict' END;
            detail := NULL; RETURN NEXT; CONTINUE;
        END IF;

        SELECT g.run_id, g.version INTO v_pos_run, v_pos_ver FROM consumer_guards g
         WHERE g.tenant_id = v_me.tenant_id AND g.consumer = v_me.name
           AND g.document_id = e."documentId" AND g.event_id <> e."eventId"
         ORDER BY g.run_id DESC, g.version DESC LIMIT 1;
        IF v_pos_run > e."runId" OR (v_pos_run = e."runId" AND v_pos_ver >= e.version) THEN
            verdict := 'stale';
            detail := format('position is run %s version %s', v_pos_run, v_pos_ver);
            RETURN NEXT; CONTINUE;
        END IF;
        IF v_pos_run IS DISTINCT FROM e."runId" THEN
            v_pos_ver := 0;  -- a new run: its versions start again at 1
        END IF;

        SELECT s.version INTO v_state FROM document_state s
         WHERE s.tenant_id = v_me.tenant_id AND s.document_id = e."documentId"
           AND s.run_id = e."runId";
        IF NOT FOUND OR e.version > v_state THEN
            DELETE FROM consumer_guards g WHERE g.tenant_id = v_me.tenant_id
               AND g.consumer = v_me.name AND g.event_id = e."eventId";
            verdict := 'future';
            detail := format('the database holds %s of run %s',
                             coalesce('version ' || v_state, 'no state'), e."runId");
            RETURN NEXT; CONTINUE;
        END IF;

        -- Versions between the position and this one that this consumer
        -- handles: they were accepted, so their events exist and are late.
        -- (The next version in line, the usual case, needs no look.)
        v_missing := NULL;
        IF e.version > v_pos_ver + 1 THEN
            SELECT string_agg(h.version::text, ',' ORDER BY h.version) INTO v_missing
              FROM document_history h
             WHERE h.tenant_id = v_me.tenant_id AND h.document_id = e."documentId"
               AND h.run_id = e."runId" AND h.version > v_pos_ver AND h.version < e.version
               AND h.event_type = ANY (p_types)
               AND (p_owner IS NULL OR h.owner_after = p_owner);
        END IF;
        IF v_missing IS NOT NULL AND NOT p_reconcile THEN
            DELETE FROM consumer_guards g WHERE g.tenant_id = v_me.tenant_id
               AND g.consumer = v_me.name AND g.event_id = e."eventId";
            verdict := 'gap'; detail := v_missing; RETURN NEXT; CONTINUE;
        END IF;

        -- Applied: this guard row is the new position; a rollback undoes both.
        verdict := 'apply'; detail := v_missing; RETURN NEXT;
    END LOOP;
END
$$;
