-- Functions behind the processes' Prometheus metrics (the dashboard and alert rules
-- in deploy/ read them): each answers for the calling service only, through the same
-- identity check as its other calls, and reads only index entries of open work.

-- The calling service's effect work for its metrics (handoff_effects_open,
-- handoff_effects_unresolved, handoff_effects_oldest_open_seconds): open
-- intents by state, and those waiting for a person. One branch per partial
-- index (ready, again, unresolved), so each count reads only its own index
-- entries, never the settled intents that make up most of the ledger.
CREATE OR REPLACE FUNCTION handoff.effect_pending()
RETURNS TABLE (state text, n bigint, oldest_s double precision)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    WITH me AS (SELECT * FROM _consumer())
    SELECT 'intended', count(*),
           coalesce(extract(epoch FROM now() - min(i.created_at)), 0)::double precision
      FROM effect_intents i, me
     WHERE i.tenant_id = me.tenant_id AND i.consumer = me.name
       AND i.state = 'intended' AND i.reconciliation <> 'unresolved'
    UNION ALL
    SELECT i.state, count(*),
           coalesce(extract(epoch FROM now() - min(i.created_at)), 0)::double precision
      FROM effect_intents i, me
     WHERE i.tenant_id = me.tenant_id AND i.consumer = me.name
       AND i.state IN ('claimed', 'submitted', 'unknown') AND i.reconciliation <> 'unresolved'
     GROUP BY i.state
    UNION ALL
    SELECT 'unresolved', count(*),
           coalesce(extract(epoch FROM now() - min(i.created_at)), 0)::double precision
      FROM effect_intents i, me
     WHERE i.tenant_id = me.tenant_id AND i.consumer = me.name
       AND i.reconciliation = 'unresolved';
$$;
