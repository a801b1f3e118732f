-- The tracker's read side: reader sessions (a service credential, or a web UI
-- session), the relay's backlog, the deadline counters and their fold, the
-- flow fold and the minute samples of waiting work.
--
-- Each function as the database holds it after `handoff db upgrade`, with
-- the why of it: tests/integration/contract/test_sql_functions.py applies
-- this file to an upgraded database and checks that no definition changes.
-- Only the migration that changes a function applies its family's file
-- (handoff/migrations/helpers.py apply_family); grants and tables stay in
-- the migrations, and old databases still upgrade step by step.

-- Accepts a service credential for this transaction: sets the tenant the
-- reader may see and answers (tenant, service), or no row when the
-- credential is unknown (then the tenant stays unset and every read is
-- empty). SECURITY DEFINER: the reader cannot read the services table.
-- Why SET LOCAL rather than set_config(): on Citus the statement is what
-- reaches the workers a read's statements run on (the database's
-- citus.propagate_set_commands = local), where row-level security reads the
-- setting too; a value set by set_config() stays on the coordinator.
CREATE OR REPLACE FUNCTION handoff.reader_session(p_role text, p_secret_hash bytea)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
BEGIN
    SELECT s.tenant_id, s.name INTO tenant_id, service
      FROM handoff.services s
     WHERE s.db_role = p_role AND s.secret_hash = p_secret_hash AND s.revoked_at IS NULL;
    IF FOUND THEN
        EXECUTE format('SET LOCAL handoff.tenant = %L', tenant_id);
        RETURN NEXT;
    END IF;
END
$$;

-- The reader's tenant's services (their consumer groups are looked up in Kafka).
CREATE OR REPLACE FUNCTION handoff.reader_services()
RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT name FROM handoff.services
     WHERE tenant_id = current_setting('handoff.tenant', true) ORDER BY name
$$;

-- For the operate page. The relay is shared by every tenant, so its backlog
-- is the system's (pending rows capped at p_cap: counting walks the ids above
-- the lowest slot bound; the oldest is the first of them); parked rows are the
-- reader's tenant's own. SECURITY DEFINER: the reader cannot read the outbox.
CREATE OR REPLACE FUNCTION handoff.relay_backlog(p_cap integer DEFAULT 100000)
RETURNS TABLE (pending bigint, oldest_pending_at timestamptz, parked bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT (SELECT count(*) FROM (SELECT 1 FROM handoff.outbox_pending LIMIT p_cap) AS p),
           (SELECT created_at FROM handoff.outbox_pending ORDER BY id LIMIT 1),
           (SELECT count(*) FROM handoff.outbox
             WHERE tenant_id = current_setting('handoff.tenant', true) AND parked_at IS NOT NULL)
$$;

-- The hour a deadline falls in, independent of the session's time zone.
CREATE OR REPLACE FUNCTION handoff._due_bucket(p_due timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN date_bin('1 hour', p_due, timestamptz '2000-01-01 00:00:00+00');

-- Kept by a trigger rather than inside the emit function so that every
-- writer of document_state keeps them right (the emit function, bulk loads).
-- Why a deferred constraint trigger: it runs at commit, so the counter rows
-- are locked only for the commit itself, not for the rest of the emit
-- (history, outbox, receipt); one owner's new work shares its deadline hour,
-- and those rows are the hot ones. Both rows go in one statement, in
-- (owner, hour) order: the same global order in every transaction, so
-- crossing handoffs cannot deadlock on them.
CREATE OR REPLACE FUNCTION handoff._due_count_trigger() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_shard smallint := (pg_backend_pid() % 16)::smallint;
    v_old   boolean  := TG_OP = 'UPDATE' AND OLD.owner IS NOT NULL AND OLD.due_at IS NOT NULL;
    v_new   boolean  := NEW.owner IS NOT NULL AND NEW.due_at IS NOT NULL;
BEGIN
    IF v_old AND v_new AND OLD.owner = NEW.owner
       AND handoff._due_bucket(OLD.due_at) = handoff._due_bucket(NEW.due_at) THEN
        RETURN NULL;  -- same owner, same deadline hour: nothing moves
    END IF;
    INSERT INTO handoff.owner_due_counts AS c (tenant_id, owner, due_hour, shard, n)
    SELECT NEW.tenant_id, k.owner, k.due_hour, v_shard, k.delta
      FROM (VALUES (OLD.owner, handoff._due_bucket(OLD.due_at), -1, v_old),
                   (NEW.owner, handoff._due_bucket(NEW.due_at), 1, v_new))
           AS k (owner, due_hour, delta, wanted)
     WHERE k.wanted
     ORDER BY k.owner COLLATE "C", k.due_hour
    ON CONFLICT (tenant_id, owner, due_hour, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END
$$;

-- Folds the shards of hours that have passed into one -infinity row per
-- owner, in one statement (atomic: the sums never change). The tracker runs
-- it every minute; without it the counts stay right and get slowly slower.
CREATE OR REPLACE FUNCTION handoff.fold_due_counts() RETURNS bigint
LANGUAGE sql
AS $$
    WITH gone AS (
        DELETE FROM handoff.owner_due_counts
         WHERE due_hour > '-infinity' AND due_hour < handoff._due_bucket(now())
        RETURNING tenant_id, owner, n
    ), folded AS (
        INSERT INTO handoff.owner_due_counts AS c (tenant_id, owner, due_hour, shard, n)
        SELECT tenant_id, owner, '-infinity', 0, sum(n) FROM gone GROUP BY tenant_id, owner
        ON CONFLICT (tenant_id, owner, due_hour, shard) DO UPDATE SET n = c.n + EXCLUDED.n
        RETURNING 1
    )
    SELECT count(*) FROM gone;
$$;

-- Folds the outbox rows committed since the last fold (at most p_limit,
-- plus the gaps that have since appeared) into flow_minutes and flow_edges.
-- One tracker folds at a time (the row lock; the others skip). Returns the
-- number of outbox rows folded.
CREATE OR REPLACE FUNCTION handoff.fold_flow(p_limit integer DEFAULT 100000,
                                  p_keep interval DEFAULT '8 days',
                                  p_gap_wait interval DEFAULT '5 minutes')
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_high   bigint;
    v_folded bigint;
BEGIN
    -- On Citus the outbox's ids are no one sequence (handoff/migrations/citus.py): its
    -- rows are marked folded instead, one tenant at a time.
    IF EXISTS (SELECT 1 FROM pg_attribute
                WHERE attrelid = 'handoff.outbox'::regclass AND attname = 'folded_at'
                  AND NOT attisdropped) THEN
        RETURN handoff._fold_flow_marked(p_limit, p_keep);
    END IF;
    SELECT high INTO v_high FROM handoff.flow_fold FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH seen AS MATERIALIZED (
        (SELECT o.id, o.tenant_id, o.created_at,
                coalesce(o.payload->>'previousOwner', '') AS from_owner,
                coalesce(o.payload->>'owner', '') AS to_owner
           FROM handoff.outbox o
          WHERE o.id > v_high
          ORDER BY o.id
          LIMIT p_limit)
        UNION ALL
        SELECT o.id, o.tenant_id, o.created_at,
               coalesce(o.payload->>'previousOwner', ''), coalesce(o.payload->>'owner', '')
          FROM handoff.flow_gaps g JOIN handoff.outbox o USING (id)
    ), moves AS (
        SELECT * FROM seen WHERE from_owner <> to_owner
    ), minutes AS (
        INSERT INTO handoff.flow_minutes AS f (tenant_id, minute, from_owner, to_owner, n)
        SELECT tenant_id, date_bin('1 minute', created_at, timestamptz '2000-01-01 00:00:00+00'),
               from_owner, to_owner, count(*)
          FROM moves
         WHERE created_at >= now() - p_keep
         GROUP BY 1, 2, 3, 4
         ORDER BY 1, 2, 3, 4
        ON CONFLICT (tenant_id, minute, from_owner, to_owner) DO UPDATE SET n = f.n + EXCLUDED.n
        RETURNING 1
    ), edges AS (
        INSERT INTO handoff.flow_edges AS e (tenant_id, from_owner, to_owner, n, last_at)
        SELECT tenant_id, from_owner, to_owner, count(*), max(created_at)
          FROM moves
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3
        ON CONFLICT (tenant_id, from_owner, to_owner)
        DO UPDATE SET n = e.n + EXCLUDED.n, last_at = greatest(e.last_at, EXCLUDED.last_at)
        RETURNING 1
    ), found AS (
        DELETE FROM handoff.flow_gaps g USING seen s WHERE g.id = s.id RETURNING 1
    ), top AS (
        SELECT max(id) AS id FROM seen WHERE id > v_high
    ), missing AS (
        -- The ids skipped just below each new row, only below a recent row
        -- and only the nearest 10,000: an id missing under an old row, or
        -- further down than writers in flight can hold, was rolled back or
        -- deleted, and waiting for it would only grow this table.
        INSERT INTO handoff.flow_gaps (id)
        SELECT i
          FROM (SELECT id, created_at, lag(id, 1, v_high) OVER (ORDER BY id) AS below
                  FROM seen WHERE id > v_high) r,
               generate_series(greatest(r.below + 1, r.id - 10000), r.id - 1) AS i
         WHERE r.created_at >= now() - p_gap_wait
        RETURNING 1
    ), moved AS (
        UPDATE handoff.flow_fold
           SET high = greatest(high, coalesce((SELECT id FROM top), high)), folded_at = now()
        RETURNING 1
    )
    -- (Data-modifying CTEs run once whether or not the query reads them.)
    SELECT count(*) INTO v_folded FROM seen;
    -- Ids still missing after this long were rolled back; and old minutes go.
    DELETE FROM handoff.flow_gaps WHERE noticed_at < now() - p_gap_wait;
    DELETE FROM handoff.flow_minutes WHERE minute < now() - p_keep;
    RETURN v_folded;
END
$$;

-- Takes one sample of every tenant's waiting work, unless one was taken
-- less than p_every ago (several trackers: the first one samples). Cost:
-- per owner, owner_waiting plus two index offsets (the median and the p90
-- position) on document_state_by_owner; once a minute. One tenant at a
-- time: each statement names its tenant, so on Citus it runs on the
-- tenant's worker (one statement over every tenant that calls
-- owner_waiting is pushed down to each shard, where Citus refuses
-- owner_waiting's own distributed queries).
CREATE OR REPLACE FUNCTION handoff.sample_owners(p_every interval DEFAULT '1 minute',
                                      p_keep interval DEFAULT '8 days')
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_sampled bigint := 0;
    v_rows    bigint;
    v_tenant  text;
BEGIN
    PERFORM 1 FROM handoff.flow_fold
      WHERE sampled_at IS NULL OR sampled_at <= now() - p_every + interval '1 second'
      FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR v_tenant IN SELECT DISTINCT tenant_id FROM handoff.owner_counts LOOP
        INSERT INTO handoff.owner_samples (tenant_id, sampled_at, owner, assigned, overdue,
                                           oldest_assigned_at, age_p50_from, age_p90_from,
                                           coarse)
        SELECT v_tenant, now(), w.owner, w.assigned, w.overdue, w.oldest_assigned_at,
               (SELECT s.assigned_at FROM handoff.document_state s
                 WHERE s.tenant_id = v_tenant AND s.owner = w.owner
                 ORDER BY s.assigned_at, s.document_id
                OFFSET greatest(ceil(w.assigned * 0.5)::bigint - 1, 0) LIMIT 1),
               -- 90% of the work is younger than this: the 10th percentile of assignment.
               (SELECT s.assigned_at FROM handoff.document_state s
                 WHERE s.tenant_id = v_tenant AND s.owner = w.owner
                 ORDER BY s.assigned_at, s.document_id
                OFFSET greatest(ceil(w.assigned * 0.1)::bigint - 1, 0) LIMIT 1),
               -- coarse: the owner's first sample in this 10-minute bin (so a new
               -- tenant or owner has a day chart from its first sample on)
               NOT EXISTS (SELECT 1 FROM handoff.owner_samples p
                            WHERE p.tenant_id = v_tenant AND p.owner = w.owner AND p.coarse
                              AND p.sampled_at >= date_bin('10 minutes', now(),
                                                           timestamptz '2000-01-01 00:00:00+00'))
          FROM handoff.owner_waiting(v_tenant) w;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        v_sampled := v_sampled + v_rows;
    END LOOP;
    UPDATE handoff.flow_fold SET sampled_at = now();
    DELETE FROM handoff.owner_samples WHERE sampled_at < now() - p_keep;
    RETURN v_sampled;
END
$$;

-- Each owner's waiting work in one tenant: assigned (the shards summed),
-- overdue (passed deadline hours from owner_due_counts plus an exact count
-- of the current hour), the oldest assignment. One function for the
-- tracker's live counts and for the minute samples, so both count alike.
-- Not SECURITY DEFINER: the reader's row-level security applies. PL/pgSQL
-- rather than an inlined SQL function: Citus cannot plan a SQL function's
-- query with parameters over distributed tables, and refuses it.
CREATE OR REPLACE FUNCTION handoff.owner_waiting(p_tenant text)
RETURNS TABLE (owner text, assigned bigint, overdue bigint, oldest_assigned_at timestamptz)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH assigned AS (
        SELECT c.owner, sum(c.assigned)::bigint AS assigned
          FROM handoff.owner_counts c
         WHERE c.tenant_id = p_tenant
         GROUP BY c.owner
        HAVING sum(c.assigned) > 0
    ), past_due AS (
        SELECT d.owner, sum(d.n)::bigint AS n
          FROM handoff.owner_due_counts d
         WHERE d.tenant_id = p_tenant AND d.due_hour < handoff._due_bucket(now())
         GROUP BY d.owner
    )
    SELECT a.owner, a.assigned,
           coalesce(p.n, 0) + (
               SELECT count(*) FROM handoff.document_state s
                WHERE s.tenant_id = p_tenant AND s.owner = a.owner
                  AND s.due_at >= handoff._due_bucket(now()) AND s.due_at < now()
           ),
           (SELECT s.assigned_at FROM handoff.document_state s
             WHERE s.tenant_id = p_tenant AND s.owner = a.owner
             ORDER BY s.assigned_at, s.document_id
             LIMIT 1)
      FROM assigned a LEFT JOIN past_due p USING (owner);
END
$$;

-- A live session's service, or no row: unknown, expired, idle too long, or
-- its credential rotated, revoked or removed since. Its last use is noted
-- at most once a minute (a write per page view would be a write per read).
CREATE OR REPLACE FUNCTION handoff.ui_session(p_id_hash bytea)
RETURNS TABLE (tenant_id text, service text, db_role text, secret_hash bytea)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v record;
BEGIN
    SELECT u.tenant_id, u.service, s.db_role, s.secret_hash, u.last_seen_at INTO v
      FROM ui_sessions u
      JOIN services s ON s.tenant_id = u.tenant_id AND s.name = u.service
     WHERE u.id_hash = p_id_hash AND s.secret_hash = u.secret_hash AND s.revoked_at IS NULL
       AND u.expires_at > now() AND u.last_seen_at > now() - u.idle;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v.last_seen_at < now() - interval '1 minute' THEN
        UPDATE ui_sessions SET last_seen_at = now() WHERE id_hash = p_id_hash;
    END IF;
    RETURN QUERY SELECT v.tenant_id, v.service, v.db_role, v.secret_hash;
END
$$;

-- The reader's form of it: accepts a session for this transaction as
-- reader_session accepts a credential (sets the tenant the reader may see).
CREATE OR REPLACE FUNCTION handoff.ui_reader_session(p_id_hash bytea)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
BEGIN
    SELECT s.tenant_id, s.service INTO tenant_id, service FROM handoff.ui_session(p_id_hash) s;
    IF FOUND THEN
        EXECUTE format('SET LOCAL handoff.tenant = %L', tenant_id);  -- why: reader_session
        RETURN NEXT;
    END IF;
END
$$;

-- Sign-in: a session for an active credential, or no row.
CREATE OR REPLACE FUNCTION handoff.ui_session_open(p_role text, p_secret_hash bytea, p_id_hash bytea,
                                        p_lifetime interval, p_idle interval)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE sql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    INSERT INTO handoff.ui_sessions AS u (id_hash, tenant_id, service, secret_hash, expires_at,
                                          idle)
    SELECT p_id_hash, s.tenant_id, s.name, s.secret_hash, now() + p_lifetime, p_idle
      FROM handoff.services s
     WHERE s.db_role = p_role AND s.secret_hash = p_secret_hash AND s.revoked_at IS NULL
    RETURNING u.tenant_id, u.service;
$$;
