-- The tracker's read side (DESIGN.md "Tracker").

-- Assigned documents with a deadline, per owner and per hour of deadline,
-- in shards. Why: "how many are overdue" must not count every overdue
-- document (that grows with the backlog). With these rows it is the sum of
-- the hours that have fully passed plus an exact index count of the current
-- hour only, so the per-owner counts cost O(owners x hours since the last
-- fold), whatever the number of documents. Shards as in owner_counts: new
-- work for one owner tends to share a deadline hour, one row would be hot.
-- A shard may go negative; only sums mean anything.
CREATE TABLE handoff.owner_due_counts (
    tenant_id text        NOT NULL,
    owner     text        NOT NULL,
    due_hour  timestamptz NOT NULL,  -- start of the hour; -infinity holds folded past hours
    shard     smallint    NOT NULL,
    n         bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, owner, due_hour, shard)
) WITH (fillfactor = 50);

-- The hour a deadline falls in, independent of the session's time zone.
CREATE FUNCTION handoff._due_bucket(p_due timestamptz) RETURNS timestamptz
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
CREATE FUNCTION handoff._due_count_trigger() RETURNS trigger
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

CREATE CONSTRAINT TRIGGER document_state_due_insert AFTER INSERT ON handoff.document_state
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.owner IS NOT NULL AND NEW.due_at IS NOT NULL)
    EXECUTE FUNCTION handoff._due_count_trigger();
-- Progress that keeps owner and deadline (the common case) does not fire it.
CREATE CONSTRAINT TRIGGER document_state_due_update AFTER UPDATE OF owner, due_at
    ON handoff.document_state
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.owner IS DISTINCT FROM NEW.owner OR OLD.due_at IS DISTINCT FROM NEW.due_at)
    EXECUTE FUNCTION handoff._due_count_trigger();

-- Documents assigned before this migration. CREATE TRIGGER above locks
-- document_state against writers until this transaction commits, so the
-- backfill and the trigger meet exactly.
INSERT INTO handoff.owner_due_counts (tenant_id, owner, due_hour, shard, n)
SELECT tenant_id, owner, handoff._due_bucket(due_at), 0, count(*)
  FROM handoff.document_state
 WHERE owner IS NOT NULL AND due_at IS NOT NULL
 GROUP BY 1, 2, 3;

-- Folds the shards of hours that have passed into one -infinity row per
-- owner, in one statement (atomic: the sums never change). The tracker runs
-- it every minute; without it the counts stay right and get slowly slower.
CREATE FUNCTION handoff.fold_due_counts() RETURNS bigint
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

CREATE INDEX rejections_by_tenant ON handoff.rejections (tenant_id, id);

-- The tracker reads as handoff_reader, one tenant per transaction. Row-level
-- security is the backstop behind the tenant filter of every read query: a
-- reader transaction sees only rows of the tenant its credential belongs to,
-- and nothing at all before reader_session() has accepted a credential.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'handoff_reader') THEN
        CREATE ROLE handoff_reader NOLOGIN;
    END IF;
END
$$;
GRANT handoff_reader TO CURRENT_USER;
GRANT USAGE ON SCHEMA handoff TO handoff_reader;
GRANT SELECT ON handoff.document_state, handoff.document_history, handoff.owner_counts,
                handoff.owner_due_counts, handoff.rejections TO handoff_reader;

ALTER TABLE handoff.document_state ENABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.document_history ENABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.owner_counts ENABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.owner_due_counts ENABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.rejections ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_reader ON handoff.document_state FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
CREATE POLICY tenant_reader ON handoff.document_history FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
CREATE POLICY tenant_reader ON handoff.owner_counts FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
CREATE POLICY tenant_reader ON handoff.owner_due_counts FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
CREATE POLICY tenant_reader ON handoff.rejections FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));

-- Accepts a service credential for this transaction: sets the tenant the
-- reader may see and answers (tenant, service), or no row when the
-- credential is unknown (then the tenant stays unset and every read is
-- empty). SECURITY DEFINER: the reader cannot read the services table.
CREATE FUNCTION handoff.reader_session(p_role text, p_secret_hash bytea)
RETURNS TABLE (tenant_id text, service text)
LANGUAGE sql SECURITY DEFINER
AS $$
    SELECT set_config('handoff.tenant', s.tenant_id, true), s.name
      FROM handoff.services s
     WHERE s.db_role = p_role AND s.secret_hash = p_secret_hash;
$$;
REVOKE ALL ON FUNCTION handoff.reader_session, handoff.fold_due_counts,
                       handoff._due_count_trigger FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.reader_session TO handoff_reader;
