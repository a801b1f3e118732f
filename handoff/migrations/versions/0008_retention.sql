-- Retention, configured in one place with the replay window (issue 13).
--
-- What is kept, and for how long after it stops mattering:
--   receipts    the idempotency record of each accepted event id
--   guards      a consumer's record of each event it took (its duplicate guard)
--   outbox      published rows (the relay purges them; it keeps them at least
--               as long as its own HANDOFF_RELAY_RETENTION_HOURS)
--   rejections  rejected attempts (troubleshooting)
--   quarantine  closed quarantine entries (resolved, discarded) and their audit
-- The replay window is how far back a replay may reach. Deleting a guard or
-- a receipt inside it would let a replayed event, or a re-sent request, act
-- a second time: so receipts, guards and the outbox are kept at least that
-- long, and the table refuses anything shorter (the CLI explains first).
CREATE TABLE handoff.retention (
    id            boolean  PRIMARY KEY DEFAULT true CHECK (id),
    replay_window interval NOT NULL DEFAULT '1 day',
    receipts      interval NOT NULL DEFAULT '30 days',
    guards        interval NOT NULL DEFAULT '30 days',
    outbox        interval NOT NULL DEFAULT '1 day',
    rejections    interval NOT NULL DEFAULT '30 days',
    quarantine    interval NOT NULL DEFAULT '90 days',
    updated_at    timestamptz NOT NULL DEFAULT now(),
    updated_by    text     NOT NULL DEFAULT 'migration',
    CONSTRAINT receipts_cover_replay CHECK (receipts >= replay_window),
    CONSTRAINT guards_cover_replay CHECK (guards >= replay_window),
    CONSTRAINT outbox_covers_replay CHECK (outbox >= replay_window),
    CONSTRAINT positive CHECK (replay_window > interval '0' AND rejections > interval '0'
                               AND quarantine > interval '0')
);
INSERT INTO handoff.retention DEFAULT VALUES;

-- The purge finds old rows by age. BRIN, not btree: these tables are written
-- in time order by every emit and every consumed event, and a BRIN index
-- summarises block ranges instead of adding an entry per row (as the
-- outbox's created_at index does), so the hot paths pay next to nothing.
CREATE INDEX receipts_by_age ON handoff.receipts USING brin (accepted_at);
CREATE INDEX consumer_guards_by_age ON handoff.consumer_guards USING brin (taken_at);
CREATE INDEX rejections_by_age ON handoff.rejections USING brin (rejected_at);
CREATE INDEX quarantine_closed_by_age ON handoff.quarantine (resolved_at)
    WHERE status IN ('resolved', 'discarded');
