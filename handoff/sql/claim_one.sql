-- One event's guard and ordering (_guard_one), shared by consumer_begin's
-- one-at-a-time path, and the one-event claim a batch-1 unit sends
-- (consumer_claim_one, and consumer_claim_one_for naming the tenant).
--
-- Why a claim of its own for one event: consumer_claim takes a JSON array and
-- reads consumer_begin's verdicts, a set-returning PL/pgSQL function, through
-- a query of its own; with scalar arguments the same guard runs as two plain
-- calls. pgbench, one client, the unit's guard and one INSERT (`handoff bench
-- consumer`, three runs, 2026-12-07): 0.42-0.43x a one-INSERT transaction,
-- 1.09-1.13x consumer_begin's unit in the same runs. Each function as the
-- database holds it after `handoff db upgrade` (0030_claim_one), with the why
-- of it, as in consumers.sql.

-- The verdict on one event of ``v_me``'s (consumers.sql, consumer_begin, says
-- what each verdict means), with its guard row left when it is "apply" or
-- "stale". Called only by the SECURITY DEFINER functions of the consumer
-- family, whose search_path and plan settings it runs under; no role may call
-- it (it takes the service as an argument).
CREATE OR REPLACE FUNCTION handoff._guard_one(
    v_me handoff.services, p_blocked boolean, p_event_id text, p_fingerprint bytea,
    p_document_id text, p_run_id integer, p_version integer, p_types text[], p_owner text,
    p_reconcile boolean, OUT verdict text, OUT detail text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_old_fp   bytea;
    v_pos_run  integer;
    v_pos_ver  integer;
    v_state    integer;
    v_missing  text;
BEGIN
    IF p_blocked THEN
        IF EXISTS (SELECT 1 FROM quarantine q
                    WHERE q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
                      AND q.event_id = p_event_id AND q.status IN ('open', 'retry'))
           OR EXISTS (SELECT 1 FROM consumer_parked p
                       WHERE p.tenant_id = v_me.tenant_id AND p.consumer = v_me.name
                         AND p.event_id = p_event_id) THEN
            verdict := 'held'; RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM quarantine q
                    WHERE q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
                      AND q.document_id = p_document_id AND q.status IN ('open', 'retry'))
           OR EXISTS (SELECT 1 FROM consumer_parked p
                       WHERE p.tenant_id = v_me.tenant_id AND p.consumer = v_me.name
                         AND p.document_id = p_document_id
                         AND (p.run_id, p.version) < (p_run_id, p_version)) THEN
            verdict := 'park'; RETURN;
        END IF;
    END IF;

    -- The guard. ON CONFLICT DO NOTHING waits for a concurrent insert of
    -- the same key to commit or roll back, then decides: two processes
    -- given the same event cannot both see it as new. A lock timeout or
    -- a serialization failure raises; it is never read as "duplicate".
    INSERT INTO consumer_guards AS g (tenant_id, consumer, event_id, fingerprint, document_id,
                                      run_id, version)
    VALUES (v_me.tenant_id, v_me.name, p_event_id, p_fingerprint, p_document_id, p_run_id,
            p_version)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT g.fingerprint INTO v_old_fp FROM consumer_guards g
         WHERE g.tenant_id = v_me.tenant_id AND g.consumer = v_me.name
           AND g.event_id = p_event_id;
        verdict := CASE WHEN v_old_fp = p_fingerprint THEN 'duplicate' ELSE 'conflict' END;
        RETURN;
    END IF;

    SELECT g.run_id, g.version INTO v_pos_run, v_pos_ver FROM consumer_guards g
     WHERE g.tenant_id = v_me.tenant_id AND g.consumer = v_me.name
       AND g.document_id = p_document_id AND g.event_id <> p_event_id
     ORDER BY g.run_id DESC, g.version DESC LIMIT 1;
    IF v_pos_run > p_run_id OR (v_pos_run = p_run_id AND v_pos_ver >= p_version) THEN
        verdict := 'stale';
        detail := format('position is run %s version %s', v_pos_run, v_pos_ver);
        RETURN;
    END IF;
    IF v_pos_run IS DISTINCT FROM p_run_id THEN
        v_pos_ver := 0;  -- a new run: its versions start again at 1
    END IF;

    SELECT s.version INTO v_state FROM document_state s
     WHERE s.tenant_id = v_me.tenant_id AND s.document_id = p_document_id
       AND s.run_id = p_run_id;
    IF NOT FOUND OR p_version > v_state THEN
        DELETE FROM consumer_guards g WHERE g.tenant_id = v_me.tenant_id
           AND g.consumer = v_me.name AND g.event_id = p_event_id;
        verdict := 'future';
        detail := format('the database holds %s of run %s',
                         coalesce('version ' || v_state, 'no state'), p_run_id);
        RETURN;
    END IF;

    -- Versions between the position and this one that this consumer
    -- handles: they were accepted, so their events exist and are late.
    -- (The next version in line, the usual case, needs no look.)
    IF p_version > v_pos_ver + 1 THEN
        SELECT string_agg(h.version::text, ',' ORDER BY h.version) INTO v_missing
          FROM document_history h
         WHERE h.tenant_id = v_me.tenant_id AND h.document_id = p_document_id
           AND h.run_id = p_run_id AND h.version > v_pos_ver AND h.version < p_version
           AND h.event_type = ANY (p_types)
           AND (p_owner IS NULL OR h.owner_after = p_owner);
    END IF;
    IF v_missing IS NOT NULL AND NOT p_reconcile THEN
        DELETE FROM consumer_guards g WHERE g.tenant_id = v_me.tenant_id
           AND g.consumer = v_me.name AND g.event_id = p_event_id;
        verdict := 'gap'; detail := v_missing; RETURN;
    END IF;

    -- Applied: this guard row is the new position; a rollback undoes both.
    verdict := 'apply'; detail := v_missing;
END
$$;

-- consumer_claim for one event, its fields as arguments: raises SQLSTATE
-- P0H00 (EventNotClaimed) unless the event is to be applied now, so that the
-- handler's writes sent after it in the unit's message never commit otherwise
-- (consumers.sql, consumer_claim, says how the consumer goes on from there).
-- p_tenant, when given, is checked as _acts_in checks it (by_tenant.sql):
-- consumer_claim_one_for passes it here rather than calling _acts_in, which
-- would look the session's service up a second time (6-10% of the unit,
-- measured with pgbench). Plan settings as consumer_begin's, for the same
-- statements.
CREATE OR REPLACE FUNCTION handoff.consumer_claim_one(
    p_event_id text, p_fingerprint bytea, p_document_id text, p_run_id integer,
    p_version integer, p_types text[], p_owner text, p_tenant text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
SET enable_seqscan = off  -- why: consumer_begin in consumers.sql
SET enable_sort = off  -- why: consumer_begin in consumers.sql
AS $$
DECLARE
    v_me      services;
    v_blocked boolean;
    v_verdict text;
BEGIN
    -- _consumer()'s lookup (consumers.sql), written out: a PL/pgSQL call of its
    -- own cost the claim's unit 3.5% (pgbench, eight alternating rounds,
    -- 2026-12-07: a median 2,921 claims/s inline against 2,822).
    SELECT * INTO v_me FROM services
     WHERE db_role = session_user::text COLLATE "default" AND revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'database role % is not an active Handoff service (unknown or revoked)',
            session_user USING ERRCODE = '28000';
    END IF;
    IF p_tenant IS NOT NULL AND v_me.tenant_id IS DISTINCT FROM p_tenant THEN
        RAISE EXCEPTION 'database role % acts in tenant %, not in %', session_user,
            v_me.tenant_id, p_tenant USING ERRCODE = '28000';
    END IF;
    -- A statement of its own: on Citus an expression that reads a distributed
    -- table is sent whole to the tenant's shard, and _guard_one called inside
    -- it would run there, where its own statements may not be routed.
    v_blocked := EXISTS (SELECT 1 FROM quarantine q
                          WHERE q.tenant_id = v_me.tenant_id AND q.consumer = v_me.name
                            AND q.status IN ('open', 'retry'))
              OR EXISTS (SELECT 1 FROM consumer_parked p
                          WHERE p.tenant_id = v_me.tenant_id AND p.consumer = v_me.name);
    v_verdict := (_guard_one(v_me, v_blocked, p_event_id, p_fingerprint, p_document_id,
                             p_run_id, p_version, p_types, p_owner, false)).verdict;
    IF v_verdict <> 'apply' THEN
        RAISE EXCEPTION 'event not claimed: %', v_verdict USING ERRCODE = 'P0H00';
    END IF;
END
$$;

-- The same, naming the consumer's tenant (by_tenant.sql says why; on Citus it
-- is handed to the tenant's worker, migrations/citus.py DELEGATED), which the
-- claim checks.
CREATE OR REPLACE FUNCTION handoff.consumer_claim_one_for(
    p_tenant text, p_event_id text, p_fingerprint bytea, p_document_id text, p_run_id integer,
    p_version integer, p_types text[], p_owner text
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM handoff.consumer_claim_one(p_event_id, p_fingerprint, p_document_id, p_run_id,
                                       p_version, p_types, p_owner, p_tenant);
END
$$;
