DROP VIEW handoff.outbox_pending;
ALTER TABLE handoff.outbox ADD COLUMN published_at timestamptz;
UPDATE handoff.outbox o SET published_at = c.moved_at
  FROM handoff.relay_cursors c
 WHERE c.slot = o.slot AND o.id <= c.published_upto AND o.parked_at IS NULL;
CREATE INDEX outbox_pending ON handoff.outbox (id, slot)
    WHERE published_at IS NULL AND parked_at IS NULL;
ALTER TABLE handoff.outbox SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_cost_delay = 0
);
DROP TABLE handoff.relay_cursors;
