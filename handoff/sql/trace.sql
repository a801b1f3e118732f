-- The trace context rows carry (telemetry/tracing.py, 0025_trace). The rows take
-- it as a column default from the transaction's handoff.trace setting; these
-- are the reads a process needs that its other calls do not answer.

-- The trace contexts of the calling service's effect intents among p_ids (the
-- ones an executor just claimed), so each provider call continues the trace of
-- the unit that intended it. Called only by an executor with tracing on;
-- answers for the caller's own intents only, by primary key.
CREATE OR REPLACE FUNCTION handoff.effect_traces(p_ids bigint[])
RETURNS TABLE (id bigint, traceparent text)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT i.id, i.traceparent
      FROM effect_intents i, _consumer() AS me
     WHERE i.tenant_id = me.tenant_id AND i.consumer = me.name AND i.id = ANY(p_ids)
       AND i.traceparent IS NOT NULL;
$$;
