REVOKE ALL ON FUNCTION handoff.effect_claim_for, handoff.effect_submitting_for,
                       handoff.effect_record_for FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.effect_claim_for, handoff.effect_submitting_for,
                          handoff.effect_record_for TO handoff_service;
