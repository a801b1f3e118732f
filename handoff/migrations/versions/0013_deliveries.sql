-- A crashing event is run max_deliveries times, not twice that (issue 22).
--
-- A consumer marks the offsets of a poll ('batch') before it runs them and,
-- once a process has stopped while on them, takes them one event at a time
-- ('event'), so that the event that stops it is the one counted. Both counts
-- used to start from one: a handler that killed its process ran
-- max_deliveries times in batches, then max_deliveries times alone (6 with
-- the default 3). Now the consumer goes one at a time after the first stop,
-- and an event of the batch that stopped starts its own count with that stop
-- (p_marks' "inherit", 1 unless max_deliveries is 1, where an event is always
-- given one run alone before it can be blamed for its batch). The function
-- keeps its signature; only this body changes.
CREATE OR REPLACE FUNCTION handoff.consumer_receive(p_kind text, p_marks jsonb) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = handoff, pg_temp
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
