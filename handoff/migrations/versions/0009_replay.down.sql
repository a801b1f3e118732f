DROP FUNCTION IF EXISTS handoff.replay_record, handoff.replay_skip, handoff.replay_stopping,
              handoff._replay_mine;
DROP TABLE handoff.replay_audit, handoff.replay_skipped, handoff.replay_items,
           handoff.replay_plans;
