DROP FUNCTION handoff.consumer_claim_one_for, handoff.consumer_claim_one, handoff._guard_one;
