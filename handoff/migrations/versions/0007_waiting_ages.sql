-- How long an owner's work has been waiting (the tracker's p50/p90/max age).
--
-- Waiting documents per owner and per hour of assignment, in shards, kept
-- like owner_due_counts (0002) and for the same reasons: a deferred trigger,
-- so the counters change in the transaction that moves the document and a
-- reader's snapshot sees both or neither; shards, because one owner's new
-- work shares an hour. With them a percentile is found by walking the
-- hours' sums (O(hours)) and then, inside the one hour that holds the rank,
-- the owner's index (O(documents assigned in that hour)), not by walking
-- every waiting document (91 ms for the median of 210,000, measured).
CREATE TABLE handoff.owner_assigned_counts (
    tenant_id     text        NOT NULL,
    owner         text        NOT NULL,
    assigned_hour timestamptz NOT NULL,
    shard         smallint    NOT NULL,
    n             bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, owner, assigned_hour, shard)
) WITH (fillfactor = 50);

CREATE FUNCTION handoff._assigned_count_trigger() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_shard smallint := (pg_backend_pid() % 16)::smallint;
    v_old   boolean  := TG_OP = 'UPDATE' AND OLD.owner IS NOT NULL AND OLD.assigned_at IS NOT NULL;
    v_new   boolean  := NEW.owner IS NOT NULL AND NEW.assigned_at IS NOT NULL;
BEGIN
    IF v_old AND v_new AND OLD.owner = NEW.owner
       AND handoff._due_bucket(OLD.assigned_at) = handoff._due_bucket(NEW.assigned_at) THEN
        RETURN NULL;
    END IF;
    -- Both rows in one statement, in (owner, hour) order: no deadlock
    -- between crossing handoffs.
    INSERT INTO handoff.owner_assigned_counts AS c (tenant_id, owner, assigned_hour, shard, n)
    SELECT NEW.tenant_id, k.owner, k.hour, v_shard, k.delta
      FROM (VALUES (OLD.owner, handoff._due_bucket(OLD.assigned_at), -1, v_old),
                   (NEW.owner, handoff._due_bucket(NEW.assigned_at), 1, v_new))
           AS k (owner, hour, delta, wanted)
     WHERE k.wanted
     ORDER BY k.owner COLLATE "C", k.hour
    ON CONFLICT (tenant_id, owner, assigned_hour, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER document_state_assigned_insert AFTER INSERT ON handoff.document_state
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.owner IS NOT NULL AND NEW.assigned_at IS NOT NULL)
    EXECUTE FUNCTION handoff._assigned_count_trigger();
-- Progress (same owner, same assignment) does not fire it.
CREATE CONSTRAINT TRIGGER document_state_assigned_update AFTER UPDATE OF owner, assigned_at
    ON handoff.document_state
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.owner IS DISTINCT FROM NEW.owner
                       OR OLD.assigned_at IS DISTINCT FROM NEW.assigned_at)
    EXECUTE FUNCTION handoff._assigned_count_trigger();

-- Documents waiting before this migration (CREATE TRIGGER holds writers off
-- until this transaction commits, so backfill and trigger meet exactly).
INSERT INTO handoff.owner_assigned_counts (tenant_id, owner, assigned_hour, shard, n)
SELECT tenant_id, owner, handoff._due_bucket(assigned_at), 0, count(*)
  FROM handoff.document_state
 WHERE owner IS NOT NULL AND assigned_at IS NOT NULL
 GROUP BY 1, 2, 3;

-- Shards of hours before the current one folded into shard 0, then hours
-- whose work has all moved on dropped: the table stays O(owners x hours with
-- waiting work). Two statements: a row the first re-creates in shard 0 must
-- not be one it also deletes. The second deletes a row only if it still
-- holds 0 when locked, so a concurrent handoff's +1 is never lost.
CREATE FUNCTION handoff.fold_assigned_counts() RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_folded bigint;
    v_dropped bigint;
BEGIN
    WITH gone AS (
        DELETE FROM handoff.owner_assigned_counts
         WHERE assigned_hour < handoff._due_bucket(now()) AND shard <> 0
        RETURNING tenant_id, owner, assigned_hour, n
    ), folded AS (
        INSERT INTO handoff.owner_assigned_counts AS c (tenant_id, owner, assigned_hour, shard, n)
        SELECT tenant_id, owner, assigned_hour, 0, sum(n) FROM gone
         GROUP BY tenant_id, owner, assigned_hour
        ON CONFLICT (tenant_id, owner, assigned_hour, shard) DO UPDATE SET n = c.n + EXCLUDED.n
        RETURNING 1
    )
    SELECT count(*) INTO v_folded FROM gone;
    DELETE FROM handoff.owner_assigned_counts
     WHERE assigned_hour < handoff._due_bucket(now()) AND shard = 0 AND n = 0;
    GET DIAGNOSTICS v_dropped = ROW_COUNT;
    RETURN v_folded + v_dropped;
END
$$;

GRANT SELECT ON handoff.owner_assigned_counts TO handoff_reader;
ALTER TABLE handoff.owner_assigned_counts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_reader ON handoff.owner_assigned_counts FOR SELECT TO handoff_reader
    USING (tenant_id = current_setting('handoff.tenant', true));
