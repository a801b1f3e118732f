REVOKE ALL ON FUNCTION handoff._guard_one, handoff.consumer_claim_one,
                       handoff.consumer_claim_one_for FROM PUBLIC;
GRANT EXECUTE ON FUNCTION handoff.consumer_claim_one, handoff.consumer_claim_one_for
    TO handoff_service;
