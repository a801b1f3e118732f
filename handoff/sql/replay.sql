-- Replays: what a running plan's runner may write (each record's outcome,
-- skipped capabilities, the checkpoint) and how it learns it should stop.
--
-- Each function as the database holds it after `handoff db upgrade`, with
-- the why of it: tests/integration/contract/test_sql_functions.py applies
-- this file to an upgraded database and checks that no definition changes.
-- Only the migration that changes a function applies its family's file
-- (handoff/migrations/helpers.py apply_family); grants and tables stay in
-- the migrations, and old databases still upgrade step by step.

-- Refuses unless plan p_plan is running for the calling consumer.
CREATE OR REPLACE FUNCTION handoff._replay_mine(p_plan text) RETURNS void
LANGUAGE plpgsql
SET search_path = handoff, pg_temp
AS $$
DECLARE
    v_me services := _consumer();
BEGIN
    PERFORM 1 FROM replay_plans
      WHERE name = p_plan AND tenant_id = v_me.tenant_id AND consumer = v_me.name
        AND status = 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'replay plan % is not running for consumer %', p_plan, v_me.name
            USING ERRCODE = '42501';
    END IF;
END
$$;

-- The runner processes as the consumer's service (its guard functions take
-- the consumer from session_user) and records each record's outcome and the
-- checkpoint in the same transaction, through these functions: a service
-- can write only the bookkeeping of a running plan of its own.
CREATE OR REPLACE FUNCTION handoff.replay_record(p_plan text, p_items jsonb, p_checkpoint jsonb)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
BEGIN
    PERFORM _replay_mine(p_plan);
    INSERT INTO replay_items AS i (plan, event_key, kafka_partition, kafka_offset, outcome, detail)
    SELECT p_plan, x.key, x."partition", x."offset", x.outcome, x.detail
      FROM jsonb_to_recordset(p_items)
           AS x(key text, "partition" integer, "offset" bigint, outcome text, detail text)
    ON CONFLICT (plan, event_key) DO UPDATE
       SET outcome = CASE
               -- a record applied before a crash and met again after the resume
               -- stays completed: its second pass is the guard doing its job
               WHEN i.outcome = 'completed' AND EXCLUDED.outcome = 'duplicate' THEN i.outcome
               ELSE EXCLUDED.outcome END,
           detail = EXCLUDED.detail, at = now();
    UPDATE replay_plans
       SET checkpoint = checkpoint || p_checkpoint, updated_at = now()
     WHERE name = p_plan;
    RETURN (SELECT stop_requested FROM replay_plans WHERE name = p_plan);
END
$$;

CREATE OR REPLACE FUNCTION handoff.replay_skip(p_plan text, p_event_id text, p_capability text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
BEGIN
    PERFORM _replay_mine(p_plan);
    INSERT INTO replay_skipped (plan, event_id, capability) VALUES (p_plan, p_event_id, p_capability)
    ON CONFLICT DO NOTHING;
END
$$;

-- Is a stop asked for? (Polled by the runner between records.)
CREATE OR REPLACE FUNCTION handoff.replay_stopping(p_plan text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT stop_requested FROM replay_plans p, _consumer() me
     WHERE p.name = p_plan AND p.tenant_id = me.tenant_id AND p.consumer = me.name;
$$;
