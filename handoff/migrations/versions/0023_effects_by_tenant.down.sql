DROP FUNCTION handoff.effect_claim_for, handoff.effect_submitting_for,
              handoff.effect_record_for;
