-- Replay with a bounded manifest (issue 13; the playbook's section 11).
--
-- A plan is a stored manifest with a stable revision (a hash of its
-- content): what may be replayed (source positions, optionally only some
-- event ids, minus excluded ones), for which tenant and consumer, with
-- which handler revision, which external capabilities, at what rate, until
-- which stop condition, reconciled by whom. No payloads: positions and ids.
-- Approving records who approved which revision; a run refuses a plan whose
-- revision is not the approved one.
CREATE TABLE handoff.replay_plans (
    name              text        PRIMARY KEY,
    tenant_id         text        NOT NULL,
    consumer          text        NOT NULL,
    manifest          jsonb       NOT NULL,
    revision          text        NOT NULL,
    status            text        NOT NULL DEFAULT 'planned' CHECK (status IN (
                          'planned', 'approved', 'running', 'stopped', 'completed')),
    approved_revision text,
    approved_by       text,
    approved_at       timestamptz,
    stop_requested    boolean     NOT NULL DEFAULT false,
    stop_reason       text,
    -- next offset to read per partition ({"0": 42, ...}): where a resume starts
    checkpoint        jsonb       NOT NULL DEFAULT '{}',
    runner            text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);

-- What became of each record of the authorised input set. Written in the
-- transaction that applied it (with the consumer's guard row), so a stop or
-- a crash never leaves an applied record unaccounted for, and a record
-- processed again after a resume finds its row (outcome kept, not counted twice).
CREATE TABLE handoff.replay_items (
    plan            text        NOT NULL REFERENCES handoff.replay_plans ON DELETE CASCADE,
    event_key       text        NOT NULL,   -- the event id, or topic:partition:offset
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    outcome         text        NOT NULL CHECK (outcome IN (
                        'completed', 'duplicate', 'quarantined', 'unresolved', 'excluded')),
    detail          text,
    at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plan, event_key)
);

-- External capabilities a replayed handler asked for and the manifest did
-- not allow: recorded, never performed.
CREATE TABLE handoff.replay_skipped (
    plan       text        NOT NULL REFERENCES handoff.replay_plans ON DELETE CASCADE,
    event_id   text        NOT NULL,
    capability text        NOT NULL,   -- an effect name, or workflow:<name>
    at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plan, event_id, capability)
);

CREATE TABLE handoff.replay_audit (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    plan     text        NOT NULL REFERENCES handoff.replay_plans ON DELETE CASCADE,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text        NOT NULL,
    action   text        NOT NULL,
    revision text,
    detail   text
);

-- Refuses unless plan p_plan is running for the calling consumer.
CREATE FUNCTION handoff._replay_mine(p_plan text) RETURNS void
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
CREATE FUNCTION handoff.replay_record(p_plan text, p_items jsonb, p_checkpoint jsonb)
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

CREATE FUNCTION handoff.replay_skip(p_plan text, p_event_id text, p_capability text)
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
CREATE FUNCTION handoff.replay_stopping(p_plan text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT stop_requested FROM replay_plans p, _consumer() me
     WHERE p.name = p_plan AND p.tenant_id = me.tenant_id AND p.consumer = me.name;
$$;

REVOKE ALL ON FUNCTION handoff._replay_mine, handoff.replay_record, handoff.replay_skip,
                       handoff.replay_stopping FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.replay_record, handoff.replay_skip, handoff.replay_stopping
    TO handoff_service;
