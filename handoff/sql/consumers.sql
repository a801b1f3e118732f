-- Consumers: who a session is, the duplicate guard and ordering
-- (consumer_begin, and consumer_claim for one round trip), delivery counts
-- of events that stop their process, and work set aside (parked or
-- quarantined) and taken back.
--
-- Each function as the database holds it after `handoff db upgrade`, with
-- the why of it: tests/integration/contract/test_sql_functions.py applies
-- this file to an upgraded database and checks that no definition changes.
-- Only the migration that changes a function applies its family's file
-- (handoff/migrations/helpers.py apply_family); grants and tables stay in
-- the migrations, and old databases still upgrade step by step.

-- The service a session logged in as (a consumer, or emit_direct's sender),
-- or SQLSTATE 28000.
CREATE OR REPLACE FUNCTION handoff._consumer() RETURNS handoff.services
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

-- Who a consumer session is: its service name and tenant.
CREATE OR REPLACE FUNCTION handoff.consumer_whoami() RETURNS TABLE (tenant_id text, name text)
LANGUAGE sql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT tenant_id, name FROM _consumer();
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
--
-- enable_seqscan = off, on this and the other per-event entry points: a
-- PL/pgSQL statement keeps the plan its session made first, and a session
-- that starts on an empty or just-vacuumed table (a new install, the next
-- benchmark after a clean-up) plans a sequential scan and a sort there. The
-- plan stays while the table grows, until autovacuum's next ANALYZE: one
-- guard's position lookup went from 0.01 ms to 0.5 ms a call over 7,000
-- rows, halving the guarded unit's rate (858 against 1,765 units/s,
-- measured with pgbench). Every statement here is a keyed lookup; with
-- sequential scans priced out, the plan is the index's at any table size.
--
-- enable_sort = off, here alone (0029_position_plans): the position
-- lookup ("this document's newest guard row") has the position index in its
-- order. On a guard table analysed before it held anything of this consumer
-- (a new tenant, the next run after a purge), the primary key, which starts
-- with the same (tenant, consumer), looked as cheap, with a sort of the one
-- row it expected; it walked every guard row of the consumer for each event
-- (a batch of 500 went from 13 ms to over a second as the table grew).
-- With sorts priced out only the position index is left; the statements
-- whose sort no index gives (the batch's ORDER BY n) keep it.
CREATE OR REPLACE FUNCTION handoff.consumer_begin(
    p_events jsonb, p_types text[], p_owner text, p_reconcile boolean
) RETURNS TABLE (verdict text, detail text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: the comment above
SET enable_sort = off  -- since 0029_position_plans; why: the comment above
AS $$
DECLARE
    v_me       services := _consumer();
    e          record;
    v_old_fp   bytea;
    v_batch    boolean;
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
    -- The batch test is a query only for a batch: PL/pgSQL plans an IF's whole
    -- condition, and this subquery's plan was made anew on every call (a custom
    -- plan for its jsonb argument), 6% of a one-event unit's server time
    -- (perf, the guarded unit in a loop).
    v_batch := NOT v_blocked AND jsonb_array_length(p_events) > 1;
    IF v_batch THEN
        v_batch := (SELECT count(DISTINCT x."documentId") = count(*)
                      FROM jsonb_to_recordset(p_events) AS x("documentId" text));
    END IF;
    IF v_batch THEN
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
    -- by), and consumers with set-aside work. Each event's guard and ordering
    -- is _guard_one's (claim_one.sql), which the one-event claim runs too.
    FOR e IN SELECT * FROM jsonb_to_recordset(p_events)
                 AS x("eventId" text, fingerprint text, "documentId" text, "runId" integer,
                      version integer)
    LOOP
        SELECT g.verdict, g.detail INTO verdict, detail
          FROM _guard_one(v_me, v_blocked, e."eventId", decode(e.fingerprint, 'hex'),
                          e."documentId", e."runId", e.version, p_types, p_owner,
                          p_reconcile) g;
        RETURN NEXT;
    END LOOP;
END
$$;

-- A one-event unit's usual case in one round trip: the consumer sends
-- BEGIN, this claim, its handler's writes and COMMIT in one message, the
-- handler having run before the guard's verdict was read. The claim is
-- consumer_begin's guard and ordering, raising unless the verdict is
-- "apply": the writes after it then never happen, the transaction rolls
-- back, and the consumer takes the event again the long way (verdict first,
-- then the handler), which handles a duplicate, a stale or parked event, a
-- gap, a conflict. A round trip costs the database about as much CPU as
-- the guard itself (measured with pgbench on the 2-core test machine:
-- 0.42 ms a unit in one round trip, 0.67 ms in four).
CREATE OR REPLACE FUNCTION handoff.consumer_claim(p_events jsonb, p_types text[], p_owner text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM consumer_begin(p_events, p_types, p_owner, false) LOOP
        IF r.verdict <> 'apply' THEN
            RAISE EXCEPTION 'event not claimed: %', r.verdict USING ERRCODE = 'P0H00';
        END IF;
    END LOOP;
END
$$;

-- A consumer marks the offsets of a poll ('batch') before it runs them and,
-- once a process has stopped while on them, takes them one event at a time
-- ('event'), so that the event that stops it is the one counted, and a
-- crashing event runs max_deliveries times in all, not that many in batches
-- and again that many alone. After the first stop the consumer goes one at a
-- time, and an event of the batch that stopped starts its own count with that
-- stop (p_marks' "inherit": 1, unless max_deliveries is 1, where an event is
-- always given one run alone before it can be blamed for its batch).
CREATE OR REPLACE FUNCTION handoff.consumer_receive(p_kind text, p_marks jsonb) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- since 0018_index_plans; why: consumer_begin
AS $$
DECLARE
    v_me    services := _consumer();
    m       record;
    d       consumer_deliveries;
    v_most  integer := 0;
    v_start integer;
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
                 AS x(topic text, "partition" integer, "first" bigint, "last" bigint,
                      inherit integer)
    LOOP
        -- A new range's count: 1, or 1 + the stop of the batch it was in.
        v_start := NULL;
        IF p_kind = 'event' AND coalesce(m.inherit, 0) > 0 THEN
            SELECT 1 + m.inherit INTO v_start FROM consumer_deliveries b
             WHERE b.tenant_id = v_me.tenant_id AND b.consumer = v_me.name AND b.kind = 'batch'
               AND b.topic = m.topic AND b.kafka_partition = m."partition" AND b.attempts >= 2
               AND m."first" BETWEEN b.first_offset AND b.last_offset;
        END IF;
        v_start := coalesce(v_start, 1);
        SELECT * INTO d FROM consumer_deliveries c
         WHERE c.tenant_id = v_me.tenant_id AND c.consumer = v_me.name AND c.topic = m.topic
           AND c.kafka_partition = m."partition" AND c.kind = p_kind
           FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO consumer_deliveries (tenant_id, consumer, topic, kafka_partition, kind,
                                             first_offset, last_offset, attempts)
            VALUES (v_me.tenant_id, v_me.name, m.topic, m."partition", p_kind, m."first",
                    m."last", v_start)
            ON CONFLICT DO NOTHING;
            v_most := greatest(v_most, v_start);
        ELSIF m."last" < d.first_offset THEN
            -- before the marked range: got through already (events go in offset order)
            v_most := greatest(v_most, 1);
        ELSIF m."first" > d.last_offset THEN
            UPDATE consumer_deliveries c SET first_offset = m."first", last_offset = m."last",
                                             attempts = v_start, updated_at = now()
             WHERE c.tenant_id = d.tenant_id AND c.consumer = d.consumer AND c.topic = d.topic
               AND c.kafka_partition = d.kafka_partition AND c.kind = d.kind;
            v_most := greatest(v_most, v_start);
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

-- Sets an event aside: parked (p_reason 'behind_quarantine' or 'gap') or
-- quarantined (p_reason 'quarantine', with category and error). A second
-- failure of an entry still pending adds an attempt to it.
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
            INSERT INTO quarantine_audit (tenant_id, quarantine_id, actor, action, detail)
            VALUES (v_me.tenant_id, v_id, v_me.name, 'failed again', p_category || ': ' || p_error);
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
        INSERT INTO quarantine_audit (tenant_id, quarantine_id, actor, action, detail)
        VALUES (v_me.tenant_id, v_id, v_me.name, 'quarantined', p_category || ': ' || p_error);
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
            now() + make_interval(secs => p_wait_s))  -- NULL without p_wait_s
    ON CONFLICT (tenant_id, consumer, event_id) DO NOTHING
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

-- Takes set-aside work back, in the caller's transaction (a rollback puts
-- it back): a parked row is deleted, a quarantine entry marked resolved.
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
        INSERT INTO quarantine_audit (tenant_id, quarantine_id, actor, action, detail)
        VALUES (v_me.tenant_id, p_id, v_me.name, 'resolved', 'the retry went through the guard');
    END IF;
    RETURN FOUND;
END
$$;

-- Work set aside that may go again now, oldest first: retries a person
-- asked for, and parked events with nothing earlier of their document
-- still pending ("expired": a gap whose wait ran out).
CREATE OR REPLACE FUNCTION handoff.consumer_due(p_limit integer)
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

-- Counts for the consumer's metrics.
CREATE OR REPLACE FUNCTION handoff.consumer_pending()
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
