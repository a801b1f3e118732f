-- consumer_begin as revisions 0018-0029 have it, before 0030_claim_one moved its
-- one-event path into _guard_one (claim_one.sql): the revisions below 0030 that
-- apply the consumers family apply this after it, and 0030's downgrade puts it back.
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
    v_fp       bytea;
    v_old_fp   bytea;
    v_pos_run  integer;
    v_pos_ver  integer;
    v_state    integer;
    v_missing  text;
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
