DROP FUNCTION handoff.effect_intend, handoff.effect_claim, handoff.effect_submitting,
              handoff.effect_record, handoff.workflow_start;
DROP TABLE handoff.effect_history, handoff.effect_intents, handoff.workflow_runs;
