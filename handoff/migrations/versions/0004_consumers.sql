-- Consumers (DESIGN.md "Consumers"): the duplicate guard, per-document
-- positions, the quarantine and the events parked behind it.
--
-- Service roles touch none of these tables directly. They call the
-- SECURITY DEFINER functions below, which take the consumer's name and
-- tenant from session_user, as emit_direct does: a service can neither
-- write another consumer's guard rows nor read its quarantine.

-- One row per event a consumer has taken [eventsourcing's tracking record].
-- Its insert is the guard: it commits with the consumer's effect, or not at
-- all, so a redelivered event finds it and has no second effect.
CREATE TABLE handoff.consumer_guards (
    tenant_id   text        NOT NULL,
    consumer    text        NOT NULL,
    event_id    text        NOT NULL,
    fingerprint bytea       NOT NULL,
    document_id text        NOT NULL,
    run_id      integer     NOT NULL,
    version     integer     NOT NULL,
    taken_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, consumer, event_id)
);

-- The position of a consumer in a document run is the highest version among
-- its guard rows (only applied and stale events keep one): one index, and
-- no second row to upsert for every event.
CREATE INDEX consumer_guards_position
    ON handoff.consumer_guards (tenant_id, consumer, document_id, run_id, version);

-- Events a consumer could not process [SQS dead-letter queue], as an owned
-- work queue: repaired by "handoff quarantine retry|discard", every step
-- audited. The raw key, value and headers are kept, so a retry decodes the
-- event afresh (after a registry or handler fix) and goes through the guard.
CREATE TABLE handoff.quarantine (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       text        NOT NULL,
    consumer        text        NOT NULL,
    event_id        text,       -- NULL when the bytes could not be decoded
    event_type      text,
    document_id     text,
    run_id          integer,
    version         integer,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    message_key     bytea,
    message_value   bytea,
    headers         jsonb       NOT NULL DEFAULT '{}',
    handler         text,
    handler_version text,
    category        text        NOT NULL CHECK (category IN (
                        'transient', 'malformed', 'denied', 'invalid_transition',
                        'conflicting_reuse', 'unexpected_version', 'handler_error')),
    error           text        NOT NULL,
    attempts        integer     NOT NULL CHECK (attempts >= 1),
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    last_failed_at  timestamptz NOT NULL DEFAULT now(),
    -- open: waiting for a person; retry: asked for, the consumer picks it up;
    -- resolved: a retry applied it; discarded: a person gave it up.
    status          text        NOT NULL DEFAULT 'open'
                        CHECK (status IN ('open', 'retry', 'resolved', 'discarded')),
    resolved_at     timestamptz
);
-- A redelivered poison event adds an attempt to its entry, not a new entry.
CREATE UNIQUE INDEX quarantine_pending_event ON handoff.quarantine (tenant_id, consumer, event_id)
    WHERE status IN ('open', 'retry');
-- "Does this document have quarantined work?", asked for every event.
CREATE INDEX quarantine_pending_document ON handoff.quarantine (tenant_id, consumer, document_id)
    WHERE status IN ('open', 'retry');
CREATE INDEX quarantine_by_status ON handoff.quarantine (status, id);

CREATE TABLE handoff.quarantine_audit (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    quarantine_id bigint      NOT NULL REFERENCES handoff.quarantine ON DELETE CASCADE,
    at            timestamptz NOT NULL DEFAULT now(),
    actor         text        NOT NULL,
    action        text        NOT NULL,
    detail        text
);
CREATE INDEX quarantine_audit_by_entry ON handoff.quarantine_audit (quarantine_id, id);

-- Events that wait in PostgreSQL rather than stall their partition: behind
-- a quarantined event of the same document, or for an earlier version that
-- has not arrived yet (a gap). The consumer takes them back in version order.
CREATE TABLE handoff.consumer_parked (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       text        NOT NULL,
    consumer        text        NOT NULL,
    event_id        text        NOT NULL,
    document_id     text        NOT NULL,
    run_id          integer     NOT NULL,
    version         integer     NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    message_key     bytea,
    message_value   bytea       NOT NULL,
    headers         jsonb       NOT NULL DEFAULT '{}',
    reason          text        NOT NULL CHECK (reason IN ('behind_quarantine', 'gap')),
    parked_at       timestamptz NOT NULL DEFAULT now(),
    wait_until      timestamptz,
    UNIQUE (tenant_id, consumer, event_id)
);
CREATE INDEX consumer_parked_by_document
    ON handoff.consumer_parked (tenant_id, consumer, document_id, run_id, version);

-- emit_direct, as in 0003, finding its service with _consumer (below), whose
-- lookup the db_role index serves.
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
    v services := _consumer();  -- the session's service, or 28000 (defined below)
BEGIN
    RETURN _emit(v.tenant_id, v.name, v.can_create, p_kind, p_sender, p_event_id, p_event_type,
                 p_document_id, p_run_id, p_next_owner, p_status, p_expected_version, p_due_at,
                 p_data, p_correlation_id, p_causation_id);
END
$$;

-- The service a session logged in as (a consumer, or emit_direct's sender),
-- or SQLSTATE 28000.
CREATE FUNCTION handoff._consumer() RETURNS handoff.services
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v handoff.services;
BEGIN
    -- session_user is a "name", collation "C": compared as is, or as text
    -- without a collation, it cannot use the db_role index (a scan of every
    -- service, 0.2 ms at 1,200 services, measured).
    SELECT * INTO v FROM handoff.services
     WHERE db_role = session_user::text COLLATE "default" AND revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'database role % is not an active Handoff service (unknown or revoked)',
            session_user USING ERRCODE = '28000';
    END IF;
    RETURN v;
END
$$;

-- Guard and ordering for a batch of events, in the caller's transaction:
-- one round trip whatever the batch size. p_events is a JSON array of
-- {eventId, fingerprint (hex), documentId, runId, version}; one verdict per
-- element, in order:
--   apply      the guard row is new and the order is right: act now (the
--              guard row is the new position; a rollback undoes both)
--   duplicate  the same event (same fingerprint) was taken before
--   conflict   the event id was taken with another fingerprint
--   stale      an older version (or an older run) than this consumer's position
--   park       the document has quarantined or parked work: wait behind it
--   held       this very event already waits in the quarantine or parked
--   gap        an earlier version this consumer handles has not been taken
--   future     a version the authoritative state does not hold
-- Only "apply" and "stale" leave a guard row: the others must be taken again.
-- p_types/p_owner describe the events this consumer handles (for the gap
-- check); p_reconcile takes a gap as closed (the wait for it ran out).
CREATE FUNCTION handoff.consumer_begin(
    p_events jsonb, p_types text[], p_owner text, p_reconcile boolean
) RETURNS TABLE (verdict text, detail text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
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

-- Sets an event aside: parked (p_reason 'behind_quarantine' or 'gap') or
-- quarantined (p_reason 'quarantine', with category and error). A second
-- failure of an entry still pending adds an attempt to it.
CREATE FUNCTION handoff.consumer_hold(
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

-- Work set aside that may go again now, oldest first: retries a person
-- asked for, and parked events with nothing earlier of their document
-- still pending ("expired": a gap whose wait ran out).
CREATE FUNCTION handoff.consumer_due(p_limit integer)
RETURNS TABLE (kind text, id bigint, topic text, kafka_partition integer, kafka_offset bigint,
               message_key bytea, message_value bytea, headers jsonb, expired boolean)
LANGUAGE sql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    WITH me AS (SELECT * FROM _consumer())
    (SELECT 'quarantine', q.id, q.topic, q.kafka_partition, q.kafka_offset, q.message_key,
            q.message_value, q.headers, false
       FROM quarantine q, me
      WHERE q.tenant_id = me.tenant_id AND q.consumer = me.name AND q.status = 'retry'
      ORDER BY q.id LIMIT p_limit)
    UNION ALL
    (SELECT 'parked', p.id, p.topic, p.kafka_partition, p.kafka_offset, p.message_key,
            p.message_value, p.headers, coalesce(p.wait_until <= now(), false)
       FROM consumer_parked p, me
      WHERE p.tenant_id = me.tenant_id AND p.consumer = me.name
        AND NOT EXISTS (SELECT 1 FROM quarantine q
                         WHERE q.tenant_id = p.tenant_id AND q.consumer = p.consumer
                           AND q.document_id = p.document_id AND q.status IN ('open', 'retry'))
        AND NOT EXISTS (SELECT 1 FROM consumer_parked e
                         WHERE e.tenant_id = p.tenant_id AND e.consumer = p.consumer
                           AND e.document_id = p.document_id
                           AND (e.run_id, e.version) < (p.run_id, p.version))
      ORDER BY p.id LIMIT p_limit);
$$;

-- Takes set-aside work back, in the caller's transaction (a rollback puts
-- it back): a parked row is deleted, a quarantine entry marked resolved.
CREATE FUNCTION handoff.consumer_take(p_kind text, p_id bigint) RETURNS boolean
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

-- Counts for the consumer's metrics.
CREATE FUNCTION handoff.consumer_pending()
RETURNS TABLE (quarantined bigint, parked bigint, oldest_s double precision)
LANGUAGE sql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    WITH me AS (SELECT * FROM _consumer()),
    q AS (SELECT count(*) AS n, min(q.first_failed_at) AS oldest FROM quarantine q, me
           WHERE q.tenant_id = me.tenant_id AND q.consumer = me.name
             AND q.status IN ('open', 'retry')),
    p AS (SELECT count(*) AS n, min(p.parked_at) AS oldest FROM consumer_parked p, me
           WHERE p.tenant_id = me.tenant_id AND p.consumer = me.name)
    SELECT q.n, p.n,
           coalesce(extract(epoch FROM now() - least(q.oldest, p.oldest)), 0)::double precision
      FROM q, p;
$$;

REVOKE ALL ON FUNCTION handoff._consumer, handoff.consumer_begin, handoff.consumer_hold,
                       handoff.consumer_due, handoff.consumer_take, handoff.consumer_pending
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.consumer_begin, handoff.consumer_hold, handoff.consumer_due,
                          handoff.consumer_take, handoff.consumer_pending TO handoff_service;

-- Who a consumer session is: its service name and tenant.
CREATE FUNCTION handoff.consumer_whoami() RETURNS TABLE (tenant_id text, name text)
LANGUAGE sql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT tenant_id, name FROM _consumer();
$$;
REVOKE ALL ON FUNCTION handoff.consumer_whoami FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.consumer_whoami TO handoff_service;

-- Deliveries started per partition [SQS ApproximateReceiveCount]: before a
-- batch is processed, its offset range in each partition is marked here, in a
-- transaction of its own. A process that dies while handling it (kill, OOM,
-- a crash in native code) leaves the mark behind; the next process to take
-- any of that range again counts one more delivery. Past the limit the
-- consumer takes the batch one event at a time (kind 'event', ranges of one),
-- and an event that still stops it is quarantined without being handed to
-- its handler again: a poison event cannot crash-loop a partition.
--   Offsets below the marked range leave it be (after a restart the group
-- resumes from its last committed offset, which may be earlier); offsets past
-- it replace it (the range was got through).
CREATE TABLE handoff.consumer_deliveries (
    tenant_id       text        NOT NULL,
    consumer        text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('batch', 'event')),
    first_offset    bigint      NOT NULL,
    last_offset     bigint      NOT NULL,
    attempts        integer     NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, consumer, topic, kafka_partition, kind)
) WITH (fillfactor = 50);  -- updated in place (HOT) on every batch

-- Marks the ranges {topic, partition, first, last} about to be processed and
-- answers the most deliveries any of them has had; p_kind 'done' tells that
-- an event's range was got through (its count starts again). Its commit need
-- not wait for the disk: a mark lost with a database crash only restarts a count.
CREATE FUNCTION handoff.consumer_receive(p_kind text, p_marks jsonb) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v_me   services := _consumer();
    m      record;
    d      consumer_deliveries;
    v_most integer := 0;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_kind = 'done' THEN
        UPDATE consumer_deliveries c SET attempts = 0, updated_at = now()
          FROM jsonb_to_recordset(p_marks)
               AS x(topic text, "partition" integer, "first" bigint, "last" bigint)
         WHERE c.tenant_id = v_me.tenant_id AND c.consumer = v_me.name AND c.kind = 'event'
           AND c.topic = x.topic AND c.kafka_partition = x."partition"
           AND c.first_offset = x."first";
        RETURN 0;
    END IF;
    FOR m IN SELECT * FROM jsonb_to_recordset(p_marks)
                 AS x(topic text, "partition" integer, "first" bigint, "last" bigint)
    LOOP
        SELECT * INTO d FROM consumer_deliveries c
         WHERE c.tenant_id = v_me.tenant_id AND c.consumer = v_me.name AND c.topic = m.topic
           AND c.kafka_partition = m."partition" AND c.kind = p_kind
           FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO consumer_deliveries (tenant_id, consumer, topic, kafka_partition, kind,
                                             first_offset, last_offset, attempts)
            VALUES (v_me.tenant_id, v_me.name, m.topic, m."partition", p_kind, m."first",
                    m."last", 1)
            ON CONFLICT DO NOTHING;
            v_most := greatest(v_most, 1);
        ELSIF m."last" < d.first_offset THEN
            v_most := greatest(v_most, 1);          -- before the marked range
        ELSIF m."first" > d.last_offset THEN
            UPDATE consumer_deliveries c SET first_offset = m."first", last_offset = m."last",
                                             attempts = 1, updated_at = now()
             WHERE c.tenant_id = d.tenant_id AND c.consumer = d.consumer AND c.topic = d.topic
               AND c.kafka_partition = d.kafka_partition AND c.kind = d.kind;
            v_most := greatest(v_most, 1);
        ELSE                                        -- taken again: one more delivery
            UPDATE consumer_deliveries c SET attempts = c.attempts + 1, updated_at = now()
             WHERE c.tenant_id = d.tenant_id AND c.consumer = d.consumer AND c.topic = d.topic
               AND c.kafka_partition = d.kafka_partition AND c.kind = d.kind;
            v_most := greatest(v_most, d.attempts + 1);
        END IF;
    END LOOP;
    RETURN v_most;
END
$$;
REVOKE ALL ON FUNCTION handoff.consumer_receive FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.consumer_receive TO handoff_service;
