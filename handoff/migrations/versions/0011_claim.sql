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
CREATE FUNCTION handoff.consumer_claim(p_events jsonb, p_types text[], p_owner text)
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
REVOKE ALL ON FUNCTION handoff.consumer_claim FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.consumer_claim TO handoff_service;

-- The SECURITY DEFINER functions that still took their caller's search_path
-- (their tables are qualified, but a caller's temporary objects come first
-- in an unpinned path): pinned as every other one is. A contract test now
-- checks every such function.
ALTER FUNCTION handoff.reader_session(text, bytea) SET search_path = handoff, pg_temp;
ALTER FUNCTION handoff.reader_services() SET search_path = handoff, pg_temp;
ALTER FUNCTION handoff.relay_backlog(integer) SET search_path = handoff, pg_temp;
