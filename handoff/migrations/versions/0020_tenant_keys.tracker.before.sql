-- The reader functions 0020_tenant_keys changes, as revision 0019 (which applies the
-- tracker family) has them; 0020's downgrade puts them back.

CREATE OR REPLACE FUNCTION handoff.reader_session(p_role text, p_secret_hash bytea)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE sql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT set_config('handoff.tenant', s.tenant_id, true), s.name
      FROM handoff.services s
     WHERE s.db_role = p_role AND s.secret_hash = p_secret_hash AND s.revoked_at IS NULL;
$$;

CREATE OR REPLACE FUNCTION handoff.ui_reader_session(p_id_hash bytea)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE sql SECURITY DEFINER
SET search_path = handoff, pg_temp
AS $$
    SELECT set_config('handoff.tenant', s.tenant_id, true), s.service
      FROM handoff.ui_session(p_id_hash) s;
$$;

CREATE OR REPLACE FUNCTION handoff.owner_waiting(p_tenant text)
RETURNS TABLE (owner text, assigned bigint, overdue bigint, oldest_assigned_at timestamptz)
LANGUAGE sql STABLE
AS $$
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
      FROM assigned a LEFT JOIN past_due p USING (owner)
$$;
